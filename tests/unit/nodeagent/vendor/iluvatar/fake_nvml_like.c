/* A stand-in NVML-shaped library: built with -DHGML as libhgml.so (T-Head, calls renamed
 * `hgml*`), without it as libixml.so (Iluvatar, NVML's own names plus `ixmlDeviceGetHealth`).
 *
 * Two cards. IXML: card 1 reports a health fault. HGML: card 0 counts an uncorrected DRAM
 * error, card 1 is in MIG mode with a 1g12gb, a 4g48gb and a `+me` profile, and has no minor
 * number to report. */
#include <stdint.h>
#include <string.h>

#define NOT_SUPPORTED 3
#define INVALID_ARGUMENT 2
#define INSUFFICIENT_SIZE 7
#define CAT(a, b) a##b
#define CALL(prefix, name) CAT(prefix, name)
#ifdef HGML
#define F(name) CALL(hgml, name)
#else
#define F(name) CALL(nvml, name)
#endif

typedef struct card { int number; } *device_t;
static struct card cards[2] = {{0}, {1}};
static int initialised;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} pci_info_t;

typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } memory_v2_t;

typedef struct {
    unsigned int version, id, isP2pSupported, sliceCount, instanceCount;
    unsigned int multiprocessorCount, copyEngineCount, decoderCount, encoderCount, jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB;
    char name[96];
} profile_info_v2_t;

typedef struct { unsigned int start, size; } placement_t;

int F(Init_v2)(void) {
    initialised = 1;
    return 0;
}

int F(DeviceGetCount_v2)(unsigned int *count) {
    if (!initialised) return 1;
    *count = 2;
    return 0;
}

int F(SystemGetDriverVersion)(char *version, unsigned int length) {
#ifdef HGML
    const char *text = "1.5.2";
#else
    const char *text = "4.1.0";
#endif
    if (length < strlen(text) + 1) return INSUFFICIENT_SIZE;
    strcpy(version, text);
    return 0;
}

#ifdef HGML
int hgmlSystemGetHggcDriverVersion_v2(int *version) {
    *version = 1050;
    return 0;
}
#else
int nvmlSystemGetCudaDriverVersion_v2(int *version) {
    *version = 10020;
    return 0;
}
#endif

int F(DeviceGetHandleByIndex_v2)(unsigned int index, device_t *device) {
    if (index > 1) return INVALID_ARGUMENT;
    *device = &cards[index];
    return 0;
}

int F(DeviceGetUUID)(device_t device, char *uuid, unsigned int length) {
    const char *text = device->number == 0 ? "GPU-8c3d9e1f-2a4b-5c6d-7e8f-90a1b2c3d4e5"
                                           : "GPU-1f2e3d4c-5b6a-4798-8a7b-6c5d4e3f2a1b";
    if (length < strlen(text) + 1) return INSUFFICIENT_SIZE;
    strcpy(uuid, text);
    return 0;
}

int F(DeviceGetName)(device_t device, char *name, unsigned int length) {
#ifdef HGML
    strncpy(name, "PPU-ZW810E", length);
#else
    strncpy(name, "Iluvatar BI-V150", length);
#endif
    return 0;
}

int F(DeviceGetPciInfo_v3)(device_t device, pci_info_t *info) {
    memset(info, 0, sizeof(*info));
    info->bus = 0x3b + device->number;
    strcpy(info->busId, device->number == 0 ? "00000000:3B:00.0" : "00000000:3C:00.0");
    strcpy(info->busIdLegacy, "0000:3B:00.0");
    return 0;
}

int F(DeviceGetMemoryInfo_v2)(device_t device, memory_v2_t *memory) {
    if (memory->version != (sizeof(memory_v2_t) | (2u << 24))) return 25; /* ARGUMENT_VERSION_MISMATCH */
#ifdef HGML
    memory->total = 34359738368ull * 3; /* a PPU-ZW810E: 96 GiB */
#else
    memory->total = 34359738368ull; /* a BI-V150: 32 GiB, as the recorded answers say */
#endif
    memory->reserved = 0;
    memory->used = 1073741824ull * device->number;
    memory->free = memory->total - memory->used;
    return 0;
}

int F(DeviceGetMinorNumber)(device_t device, unsigned int *minor) {
#ifdef HGML
    if (device->number == 1) return NOT_SUPPORTED;
#endif
    *minor = 4 + device->number;
    return 0;
}

#ifdef HGML

int hgmlDeviceGetHggcComputeCapability(device_t device, int *major, int *minor) {
    *major = 1;
    *minor = 5;
    return 0;
}

int hgmlDeviceGetNumGpuCores(device_t device, unsigned int *cores) {
    *cores = 8192;
    return 0;
}

int hgmlDeviceGetMemoryErrorCounter(device_t device, int type, int counter, int location,
                                    unsigned long long *count) {
    if (type != 1 || counter != 0 || location != 2) return INVALID_ARGUMENT;
    *count = device->number == 0;
    return 0;
}

int hgmlDeviceGetMigMode(device_t device, unsigned int *current, unsigned int *pending) {
    *current = *pending = device->number == 1;
    return 0;
}

static const struct {
    unsigned int profile, id, slices, instances;
    unsigned long long memory;
    const char *name;
} profiles[] = {
    {0, 0, 1, 8, 12288, "1g12gb"},
    {2, 2, 4, 2, 49152, "4g48gb"},
    {4, 7, 1, 7, 12288, "1g12gb+me"},
};

int hgmlDeviceGetGpuInstanceProfileInfoV(device_t device, unsigned int profile,
                                         profile_info_v2_t *info) {
    if (info->version != (sizeof(profile_info_v2_t) | (2u << 24))) return 25;
    if (device->number != 1) return NOT_SUPPORTED;
    for (unsigned int n = 0; n < sizeof(profiles) / sizeof(profiles[0]); n++) {
        if (profiles[n].profile != profile) continue;
        info->id = profiles[n].id;
        info->sliceCount = profiles[n].slices;
        info->instanceCount = profiles[n].instances;
        info->memorySizeMB = profiles[n].memory;
        strcpy(info->name, profiles[n].name);
        return 0;
    }
    return NOT_SUPPORTED;
}

int hgmlDeviceGetGpuInstancePossiblePlacements_v2(device_t device, unsigned int id,
                                                  placement_t *placements, unsigned int *count) {
    unsigned int size = id == 0 ? 1 : 4, total = id == 0 ? 8 : 2;
    if (id != 0 && id != 2) return NOT_SUPPORTED;
    if (placements == NULL) {
        *count = total;
        return 0;
    }
    if (*count < total) return INSUFFICIENT_SIZE;
    for (unsigned int n = 0; n < total; n++) {
        placements[n].start = n * size;
        placements[n].size = size;
    }
    *count = total;
    return 0;
}

#else

int nvmlDeviceGetCudaComputeCapability(device_t device, int *major, int *minor) {
    *major = 8;
    *minor = 0;
    return 0;
}

int ixmlDeviceGetHealth(device_t device, unsigned long long *health) {
    *health = device->number == 1 ? 0x8 : 0;
    return 0;
}

#endif
