/* A stand-in HGML for partitions: one PPU in MIG mode, answering NVML's MIG calls under `hgml*`
 * names with NVML's structs, argument order and status codes.
 *
 * What it keeps of the driver: the probe index and the creation id of a profile differ (index
 * 1 is id 5); a GPU instance goes only where its profile may start and onto free memory slices;
 * a GPU instance holding a compute instance cannot be destroyed (IN_USE); placements arrive by
 * pointer. It exports `hgmlInit_v2` but no `hgmlInitWithFlags`, and `hgmlComputeInstanceGetInfo`
 * without the `_v2` pynvml asks for, as an older HGML would. */
#include <stdio.h>
#include <string.h>

#define SUCCESS 0
#define INVALID_ARGUMENT 2
#define NOT_SUPPORTED 3
#define NOT_FOUND 6
#define INSUFFICIENT_SIZE 7
#define IN_USE 19
#define INSUFFICIENT_RESOURCES 23
#define MAX_GPU 8
#define CARD_UUID "GPU-5e6f7a8b-9c0d-4e1f-8a2b-3c4d5e6f7a8b"

typedef struct { unsigned int start, size; } placement_t;

typedef struct {
    unsigned int version, id, isP2pSupported, sliceCount, instanceCount;
    unsigned int multiprocessorCount, copyEngineCount, decoderCount, encoderCount, jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB;
    char name[96];
} gi_profile_t;

typedef struct {
    unsigned int version, id, sliceCount, instanceCount, multiprocessorCount;
    unsigned int sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount, sharedJpegCount;
    unsigned int sharedOfaCount;
    char name[96];
} ci_profile_t;

/* A device handle is the card or one MIG device; instance handles point into the tables. */
typedef struct handle { int mig; unsigned int gi, ci; } handle_t;
typedef struct gi { int used; unsigned int id, profile, start, size, slices; int ci_used; unsigned int ci_id; unsigned int serial; } gi_t;
typedef struct ci { gi_t *parent; } ci_t;

typedef struct { handle_t *device; unsigned int id, profileId; placement_t placement; } gi_info_t;
typedef struct { handle_t *device; gi_t *gpuInstance; unsigned int id, profileId; placement_t placement; } ci_info_t;

static handle_t card = {0, 0, 0};
static handle_t migs[MAX_GPU];
static gi_t gpus[MAX_GPU];
static ci_t computes[MAX_GPU];
static unsigned int serial;

struct profile { unsigned int index, id, slices, count, memory; const char *name; unsigned int size; };
static const struct profile profiles[] = {
    {0, 0, 1, 8, 12288, "1g12gb", 1},
    {1, 5, 4, 2, 49152, "4g48gb", 4},
    {2, 9, 1, 7, 12288, "1g12gb+me", 1},
};
#define PROFILES (sizeof(profiles) / sizeof(profiles[0]))
static const unsigned int compute_slices[] = {1, 2, 3, 4, 7, 8, 6};

static const struct profile *by_id(unsigned int id) {
    for (unsigned int i = 0; i < PROFILES; i++)
        if (profiles[i].id == id) return &profiles[i];
    return NULL;
}

int hgmlInit_v2(void) { return SUCCESS; }
int hgmlShutdown(void) { return SUCCESS; }

int hgmlDeviceGetHandleByUUID(const char *uuid, handle_t **device) {
    if (strcmp(uuid, CARD_UUID) != 0) return NOT_FOUND;
    *device = &card;
    return SUCCESS;
}

int hgmlDeviceGetUUID(handle_t *device, char *uuid, unsigned int length) {
    char text[96];
    if (!device->mig) snprintf(text, sizeof text, "%s", CARD_UUID);
    else snprintf(text, sizeof text, "MIG-5e6f7a8b-%04x-4%03x-8000-%012x", device->gi, device->ci,
                  gpus[device->gi - 1].serial);
    if (length < strlen(text) + 1) return INSUFFICIENT_SIZE;
    strcpy(uuid, text);
    return SUCCESS;
}

int hgmlDeviceGetGpuInstanceProfileInfoV(handle_t *device, unsigned int index, gi_profile_t *info) {
    if (device != &card) return INVALID_ARGUMENT;
    for (unsigned int i = 0; i < PROFILES; i++) {
        if (profiles[i].index != index) continue;
        info->id = profiles[i].id;
        info->sliceCount = profiles[i].slices;
        info->instanceCount = profiles[i].count;
        info->memorySizeMB = profiles[i].memory;
        snprintf(info->name, sizeof info->name, "%s", profiles[i].name);
        return SUCCESS;
    }
    return NOT_SUPPORTED;
}

int hgmlDeviceCreateGpuInstanceWithPlacement(handle_t *device, unsigned int id,
                                            const placement_t *placement, gi_t **instance) {
    const struct profile *profile = by_id(id);
    if (device != &card || profile == NULL || placement == NULL) return INVALID_ARGUMENT;
    if (placement->size != profile->size || placement->start % profile->size != 0 ||
        placement->start + placement->size > 8)
        return INVALID_ARGUMENT;
    int free_slot = -1;
    for (int i = 0; i < MAX_GPU; i++) {
        gi_t *g = &gpus[i];
        if (!g->used) {
            if (free_slot < 0) free_slot = i;
            continue;
        }
        if (placement->start < g->start + g->size && g->start < placement->start + placement->size)
            return INSUFFICIENT_RESOURCES;
    }
    if (free_slot < 0) return INSUFFICIENT_RESOURCES;
    gi_t *g = &gpus[free_slot];
    *g = (gi_t){1, (unsigned int)free_slot + 1, id, placement->start, placement->size,
                profile->slices, 0, 0, ++serial};
    *instance = g;
    return SUCCESS;
}

int hgmlDeviceGetGpuInstances(handle_t *device, unsigned int id, gi_t **instances,
                              unsigned int *count) {
    if (device != &card) return INVALID_ARGUMENT;
    unsigned int found = 0;
    for (int i = 0; i < MAX_GPU; i++) {
        if (!gpus[i].used || gpus[i].profile != id) continue;
        if (instances != NULL && found < *count) instances[found] = &gpus[i];
        found++;
    }
    if (instances == NULL || found > *count) {
        *count = found;
        return found ? INSUFFICIENT_SIZE : SUCCESS;
    }
    *count = found;
    return SUCCESS;
}

int hgmlGpuInstanceGetInfo(gi_t *instance, gi_info_t *info) {
    if (instance == NULL || !instance->used) return INVALID_ARGUMENT;
    info->device = &card;
    info->id = instance->id;
    info->profileId = instance->profile;
    info->placement.start = instance->start;
    info->placement.size = instance->size;
    return SUCCESS;
}

int hgmlGpuInstanceDestroy(gi_t *instance) {
    if (instance == NULL || !instance->used) return INVALID_ARGUMENT;
    if (instance->ci_used) return IN_USE;
    instance->used = 0;
    return SUCCESS;
}

int hgmlGpuInstanceGetComputeInstanceProfileInfoV(gi_t *instance, unsigned int profile,
                                                  unsigned int engine, ci_profile_t *info) {
    if (instance == NULL || !instance->used || engine != 0) return INVALID_ARGUMENT;
    if (profile >= sizeof(compute_slices) / sizeof(compute_slices[0])) return INVALID_ARGUMENT;
    if (compute_slices[profile] > instance->slices) return NOT_SUPPORTED;
    info->id = profile;
    info->sliceCount = compute_slices[profile];
    info->instanceCount = instance->slices / compute_slices[profile];
    return SUCCESS;
}

int hgmlGpuInstanceCreateComputeInstance(gi_t *instance, unsigned int profile, ci_t **compute) {
    if (instance == NULL || !instance->used) return INVALID_ARGUMENT;
    if (compute_slices[profile] != instance->slices || instance->ci_used)
        return INSUFFICIENT_RESOURCES; /* one compute instance spanning the whole instance */
    instance->ci_used = 1;
    instance->ci_id = 0;
    computes[instance - gpus].parent = instance;
    *compute = &computes[instance - gpus];
    return SUCCESS;
}

int hgmlGpuInstanceGetComputeInstances(gi_t *instance, unsigned int profile, ci_t **out,
                                       unsigned int *count) {
    if (instance == NULL || !instance->used) return INVALID_ARGUMENT;
    unsigned int found = instance->ci_used && compute_slices[profile] == instance->slices;
    if (out == NULL || found > *count) {
        *count = found;
        return found ? INSUFFICIENT_SIZE : SUCCESS;
    }
    if (found) out[0] = &computes[instance - gpus];
    *count = found;
    return SUCCESS;
}

int hgmlComputeInstanceGetInfo(ci_t *compute, ci_info_t *info) {
    if (compute == NULL || compute->parent == NULL || !compute->parent->ci_used)
        return INVALID_ARGUMENT;
    info->device = &card;
    info->gpuInstance = compute->parent;
    info->id = compute->parent->ci_id;
    info->profileId = 0;
    info->placement.start = 0;
    info->placement.size = compute->parent->slices;
    return SUCCESS;
}

int hgmlComputeInstanceDestroy(ci_t *compute) {
    if (compute == NULL || compute->parent == NULL || !compute->parent->ci_used)
        return INVALID_ARGUMENT;
    compute->parent->ci_used = 0;
    return SUCCESS;
}

int hgmlDeviceGetMaxMigDeviceCount(handle_t *device, unsigned int *count) {
    if (device != &card) return INVALID_ARGUMENT;
    *count = MAX_GPU;
    return SUCCESS;
}

int hgmlDeviceGetMigDeviceHandleByIndex(handle_t *device, unsigned int index, handle_t **mig) {
    if (device != &card) return INVALID_ARGUMENT;
    unsigned int seen = 0;
    for (int i = 0; i < MAX_GPU; i++) {
        if (!gpus[i].used || !gpus[i].ci_used) continue;
        if (seen++ == index) {
            migs[i] = (handle_t){1, gpus[i].id, gpus[i].ci_id};
            *mig = &migs[i];
            return SUCCESS;
        }
    }
    return NOT_FOUND;
}

int hgmlDeviceGetGpuInstanceId(handle_t *device, unsigned int *id) {
    if (!device->mig) return INVALID_ARGUMENT;
    *id = device->gi;
    return SUCCESS;
}

int hgmlDeviceGetComputeInstanceId(handle_t *device, unsigned int *id) {
    if (!device->mig) return INVALID_ARGUMENT;
    *id = device->ci;
    return SUCCESS;
}

int hgmlDeviceGetComputeRunningProcesses_v3(handle_t *device, unsigned int *count, void *infos) {
    (void)device;
    (void)infos;
    *count = 0;
    return SUCCESS;
}
