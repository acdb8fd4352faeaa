/* A stand-in libmtml.so with the MTML calls the MThreads detector makes: two MTT S4000 cards
 * and a guest virtual device. Card 1 counts uncorrected DRAM errors. Every object handed out
 * is counted until it is freed (`fake_live_objects`). */
#include <stdlib.h>
#include <string.h>

#define INVALID_ARGUMENT 3

typedef struct { int number; } object_t;

typedef struct {
    char sbdf[32];
    unsigned int segment, bus, device, pciDeviceId, pciSubsystemId, busWidth;
    float pciMaxSpeed, pciCurSpeed;
    unsigned int pciMaxWidth, pciCurWidth, pciMaxGen, pciCurGen;
    int rsvd[6];
} MtmlPciInfo;

typedef struct { unsigned int virtCap, virtRole, mpcCap, mpcType, mtLinkCap, rsvd, rsvd2; } MtmlDeviceProperty;

static object_t library = {-1};
static int live;

int fake_live_objects(void) { return live; }

static object_t *make(int number) {
    object_t *object = malloc(sizeof(*object));
    object->number = number;
    live++;
    return object;
}

static int release(object_t *object) {
    if (object == NULL) return INVALID_ARGUMENT;
    free(object);
    live--;
    return 0;
}

int mtmlLibraryInit(object_t **lib) {
    *lib = &library;
    return 0;
}

int mtmlLibraryCountDevice(object_t *lib, unsigned int *count) {
    if (lib != &library) return INVALID_ARGUMENT;
    *count = 3;
    return 0;
}

int mtmlLibraryInitDeviceByIndex(object_t *lib, unsigned int index, object_t **device) {
    if (lib != &library || index > 2) return INVALID_ARGUMENT;
    *device = make(index);
    return 0;
}

int mtmlLibraryFreeDevice(object_t *device) { return release(device); }

int mtmlDeviceGetProperty(object_t *device, MtmlDeviceProperty *property) {
    memset(property, 0, sizeof(*property));
    property->virtCap = 1;
    property->virtRole = device->number == 1 ? 2 : 0;
    return 0;
}

int mtmlDeviceGetUUID(object_t *device, char *uuid, unsigned int length) {
    strncpy(uuid, device->number == 0 ? "6a1f3c2d-0000-4e5f-8a9b-0c1d2e3f4a5b"
                                      : "6a1f3c2d-0002-4e5f-8a9b-0c1d2e3f4a5b", length);
    return 0;
}

int mtmlDeviceGetName(object_t *device, char *name, unsigned int length) {
    strncpy(name, "MTT S4000", length);
    return 0;
}

int mtmlDeviceGetPciInfo(object_t *device, MtmlPciInfo *info) {
    memset(info, 0, sizeof(*info));
    info->segment = 0;
    info->bus = 0x1a + 0x20 * device->number;
    strcpy(info->sbdf, "0000:1a:00.0");
    return 0;
}

int mtmlDeviceInitMemory(object_t *device, object_t **memory) {
    *memory = make(device->number);
    return 0;
}

int mtmlDeviceFreeMemory(object_t *memory) { return release(memory); }

int mtmlMemoryGetTotal(object_t *memory, unsigned long long *total) {
    *total = 51539607552ull;
    return 0;
}

int mtmlMemoryGetUsed(object_t *memory, unsigned long long *used) {
    *used = 41943040000ull * (memory->number == 2);
    return 0;
}

int mtmlMemoryGetEccErrorCounter(object_t *memory, int type, int counter, int location,
                                 unsigned long long *count) {
    if (type != 1 || counter != 0 || location != 1) return INVALID_ARGUMENT;
    *count = memory->number == 2 ? 3 : 0;
    return 0;
}

int mtmlDeviceCountGpuCores(object_t *device, unsigned int *cores) {
    *cores = 8192;
    return 0;
}

int mtmlLibraryInitSystem(object_t *lib, object_t **system) {
    *system = make(-2);
    return 0;
}

int mtmlLibraryFreeSystem(object_t *system) { return release(system); }

int mtmlSystemGetDriverVersion(object_t *system, char *version, unsigned int length) {
    strncpy(version, "2.7.0", length);
    return 0;
}
