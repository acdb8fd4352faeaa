/* A stand-in libhydmi_mig.so: Hygon's Multi-Instance library, NVML's symbol names over DMI's own
 * structs. Two cards (0000:09:00.0 index 0, 0000:0a:00.0 index 1), the node in MIG mode, each
 * offering the three profiles measured upstream on a C-3000 card: width 1 "MIG 2g.15gb" (id 3),
 * width 2 "MIG 4g.31gb" (id 1), width 4 "MIG 8g.63gb" (id 0); no 3-slice profile.
 *
 * A compute instance's registry file `ci/dev<index>gi<gi>ci<ci>.conf` (its `mig_uuid:` line a
 * fresh UUID per create) is written under $FAKE_DMI_REGISTRY when the instance is made and
 * removed when it is destroyed, as the driver does under /etc/dmi_mig_config. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUCCESS 0
#define INVALID_ARGUMENT 2
#define NOT_SUPPORTED 3
#define NOT_FOUND 6
#define INSUFFICIENT_SIZE 7
#define IN_USE 19
#define INSUFFICIENT_RESOURCES 23
#define CARDS 2
#define MAX_GPU 4

typedef struct { unsigned int start, size; } placement_t;

typedef struct {
    unsigned int id, gi_count_max, cu_count, gpu_slice_count;
    unsigned long long memory_size_MB;
    char name[256];
} gi_profile_t;

typedef struct {
    unsigned int id, ci_count_max, cu_count, gpu_slice_count;
    char name[256];
} ci_profile_t;

typedef struct card { int index; const char *bus; } card_t;
typedef struct gi {
    int used, ci_used;
    unsigned int id, profile, start, size;
    card_t *card;
} gi_t;
typedef struct ci { gi_t *parent; } ci_t;

typedef struct { card_t *device; unsigned int id, profile_id; placement_t placement; } gi_info_t;
typedef struct { card_t *device; gi_t *gpu_instance; unsigned int id, profile_id; placement_t placement; } ci_info_t;

static card_t cards[CARDS] = {{0, "0000:09:00.0"}, {1, "0000:0a:00.0"}};
static gi_t gpus[CARDS][MAX_GPU];
static ci_t computes[CARDS][MAX_GPU];
static unsigned int serial;

struct profile { unsigned int id, slices, cu, count, memory; const char *name; };
static const struct profile by_width[4] = {
    {3, 1, 20, 4, 16380, "MIG 2g.15gb"},
    {1, 2, 40, 2, 32760, "MIG 4g.31gb"},
    {0, 0, 0, 0, 0, NULL},
    {0, 4, 80, 1, 65520, "MIG 8g.63gb"},
};

static const struct profile *by_id(unsigned int id) {
    for (int i = 0; i < 4; i++)
        if (by_width[i].name && by_width[i].id == id) return &by_width[i];
    return NULL;
}

static int card_ok(card_t *card) { return card == &cards[0] || card == &cards[1]; }

static void conf_path(char *path, size_t length, gi_t *g) {
    const char *root = getenv("FAKE_DMI_REGISTRY");
    snprintf(path, length, "%s/ci/dev%dgi%uci0.conf", root ? root : "/tmp", g->card->index, g->id);
}

int nvmlGetSystemMigMode(unsigned int *current, unsigned int *pending) {
    *current = *pending = 1;
    return SUCCESS;
}

int nvmlDeviceGetCount(unsigned int *count) {
    *count = CARDS;
    return SUCCESS;
}

int nvmlDeviceGetHandleByPciBusId(const char *bus, card_t **device) {
    if (strlen(bus) != 12) return INVALID_ARGUMENT; /* the short form is refused */
    for (int i = 0; i < CARDS; i++) {
        if (strcmp(bus, cards[i].bus) == 0) {
            *device = &cards[i];
            return SUCCESS;
        }
    }
    return NOT_FOUND;
}

int nvmlDeviceGetIndex(card_t *device, unsigned int *index) {
    if (!card_ok(device)) return INVALID_ARGUMENT;
    *index = device->index;
    return SUCCESS;
}

int nvmlDeviceGetGpuInstanceProfileInfo(card_t *device, unsigned int width, gi_profile_t *info) {
    if (!card_ok(device) || width > 3 || by_width[width].name == NULL) return INVALID_ARGUMENT;
    const struct profile *p = &by_width[width];
    memset(info, 0, sizeof(*info));
    info->id = p->id;
    info->gi_count_max = p->count;
    info->cu_count = p->cu;
    info->gpu_slice_count = p->slices;
    info->memory_size_MB = p->memory;
    snprintf(info->name, sizeof info->name, "%s", p->name);
    return SUCCESS;
}

int nvmlDeviceGetGpuInstancePossiblePlacements(card_t *device, unsigned int id, placement_t *out,
                                               unsigned int *count) {
    const struct profile *p = by_id(id);
    if (!card_ok(device) || p == NULL) return INVALID_ARGUMENT;
    unsigned int found = 4 / p->slices;
    if (*count < found) return INSUFFICIENT_SIZE;
    for (unsigned int i = 0; i < found; i++) out[i] = (placement_t){i * p->slices, p->slices};
    *count = found;
    return SUCCESS;
}

int nvmlDeviceCreateGpuInstanceWithPlacement(card_t *device, unsigned int id,
                                            const placement_t *slot, gi_t **out) {
    const struct profile *p = by_id(id);
    if (!card_ok(device) || p == NULL || slot == NULL) return INVALID_ARGUMENT;
    if (slot->size != p->slices || slot->start % p->slices || slot->start + slot->size > 4)
        return INVALID_ARGUMENT;
    gi_t *free_gi = NULL;
    for (int i = 0; i < MAX_GPU; i++) {
        gi_t *g = &gpus[device->index][i];
        if (!g->used) {
            if (!free_gi) free_gi = g;
            continue;
        }
        if (slot->start < g->start + g->size && g->start < slot->start + slot->size)
            return INSUFFICIENT_RESOURCES;
    }
    if (!free_gi) return INSUFFICIENT_RESOURCES;
    *free_gi = (gi_t){1, 0, (unsigned int)(free_gi - gpus[device->index]) + 1, id, slot->start,
                      slot->size, device};
    *out = free_gi;
    return SUCCESS;
}

int nvmlDeviceGetGpuInstances(card_t *device, unsigned int id, gi_t **out, unsigned int *count) {
    if (!card_ok(device)) return INVALID_ARGUMENT;
    unsigned int found = 0;
    for (int i = 0; i < MAX_GPU; i++) {
        gi_t *g = &gpus[device->index][i];
        if (!g->used || g->profile != id) continue;
        if (found < *count) out[found] = g;
        found++;
    }
    if (found > *count) return INSUFFICIENT_SIZE;
    *count = found;
    return SUCCESS;
}

int nvmlGpuInstanceGetInfo(gi_t *g, gi_info_t *info) {
    if (g == NULL || !g->used) return INVALID_ARGUMENT;
    info->device = g->card;
    info->id = g->id;
    info->profile_id = g->profile;
    info->placement = (placement_t){g->start, g->size};
    return SUCCESS;
}

int nvmlGpuInstanceGetComputeInstanceProfileInfo(gi_t *g, unsigned int width, unsigned int engine,
                                                 ci_profile_t *info) {
    if (g == NULL || !g->used || engine != 0) return INVALID_ARGUMENT;
    if (width + 1 > g->size || width == 2) return NOT_SUPPORTED;
    memset(info, 0, sizeof(*info));
    info->id = 10 + width;
    info->gpu_slice_count = width + 1;
    info->ci_count_max = g->size / (width + 1);
    return SUCCESS;
}

int nvmlGpuInstanceCreateComputeInstance(gi_t *g, unsigned int id, ci_t **out) {
    if (g == NULL || !g->used) return INVALID_ARGUMENT;
    if (id != 10 + g->size - 1 || g->ci_used) return INSUFFICIENT_RESOURCES;
    char path[512];
    conf_path(path, sizeof path, g);
    FILE *conf = fopen(path, "w");
    if (conf == NULL) return INSUFFICIENT_RESOURCES;
    fprintf(conf, "pci:   %s\nid:   %u\nprofile_id:   %u\n", g->card->bus, g->id, g->profile);
    fprintf(conf, "pci:   %s\ngi_id:   %u\nid:   0\nprofile_id:   %u\n", g->card->bus, g->id, id);
    fprintf(conf, "mig_uuid:   6f1c2a3b-4d5e-4f60-8a71-%012x\n", ++serial);
    fclose(conf);
    g->ci_used = 1;
    computes[g->card->index][g - gpus[g->card->index]].parent = g;
    *out = &computes[g->card->index][g - gpus[g->card->index]];
    return SUCCESS;
}

int nvmlGpuInstanceGetComputeInstances(gi_t *g, unsigned int id, ci_t **out, unsigned int *count) {
    if (g == NULL || !g->used) return INVALID_ARGUMENT;
    unsigned int found = g->ci_used && id == 10 + g->size - 1;
    if (found > *count) return INSUFFICIENT_SIZE;
    if (found) out[0] = &computes[g->card->index][g - gpus[g->card->index]];
    *count = found;
    return SUCCESS;
}

int nvmlComputeInstanceGetInfo(ci_t *c, ci_info_t *info) {
    if (c == NULL || c->parent == NULL || !c->parent->ci_used) return INVALID_ARGUMENT;
    info->device = c->parent->card;
    info->gpu_instance = c->parent;
    info->id = 0;
    info->profile_id = 10 + c->parent->size - 1;
    info->placement = (placement_t){0, c->parent->size};
    return SUCCESS;
}

int nvmlComputeInstanceDestroy(ci_t *c) {
    if (c == NULL || c->parent == NULL || !c->parent->ci_used) return INVALID_ARGUMENT;
    char path[512];
    conf_path(path, sizeof path, c->parent);
    remove(path);
    c->parent->ci_used = 0;
    return SUCCESS;
}

int nvmlGpuInstanceDestroy(gi_t *g) {
    if (g == NULL || !g->used) return INVALID_ARGUMENT;
    if (g->ci_used) return IN_USE;
    g->used = 0;
    return SUCCESS;
}
