/* A stand-in librocm_smi64.so (as Hygon's DTK ships it) with the calls the Hygon detector
 * makes: two K100_AI DCUs and, listed between them, an AMD card ROCm SMI also enumerates.
 * DCU 1 counts an uncorrectable UMC error. */
#include <stdint.h>
#include <stddef.h>
#include <string.h>

#define NOT_SUPPORTED 2
#define INVALID_ARGS 1

typedef struct { uint64_t correctable_err; uint64_t uncorrectable_err; } rsmi_error_count_t;

static int initialised;

int rsmi_init(uint64_t flags) {
    if (flags != 1) return INVALID_ARGS; /* all GPUs, not only AMD's */
    initialised = 1;
    return 0;
}

int rsmi_num_monitor_devices(uint32_t *count) {
    if (!initialised) return 8; /* RSMI_STATUS_INIT_ERROR */
    *count = 3;
    return 0;
}

int rsmi_dev_vendor_id_get(uint32_t index, uint16_t *vendor) {
    *vendor = index == 1 ? 0x1002 : 0x1d94;
    return 0;
}

int rsmi_dev_unique_id_get(uint32_t index, uint64_t *id) {
    *id = 0x6a1f3e7c2b9d0e4ull + index;
    return 0;
}

int rsmi_dev_pci_id_get(uint32_t index, uint64_t *bdfid) {
    static const uint64_t buses[] = {0x3d, 0x5e, 0x9c};
    *bdfid = (0ull << 32) | (buses[index] << 8) | (0 << 3) | 0;
    return 0;
}

int rsmi_dev_name_get(uint32_t index, char *name, size_t length) {
    strncpy(name, index == 1 ? "AMD Instinct MI210" : "K100_AI", length);
    return 0;
}

int rsmi_dev_memory_total_get(uint32_t index, int type, uint64_t *total) {
    if (type != 0) return INVALID_ARGS;
    *total = 68702699520ull;
    return 0;
}

int rsmi_dev_memory_usage_get(uint32_t index, int type, uint64_t *used) {
    if (type != 0) return INVALID_ARGS;
    *used = 25165824ull * (index + 1);
    return 0;
}

int rsmi_dev_ecc_count_get(uint32_t index, int block, rsmi_error_count_t *counts) {
    if (block != 1) return NOT_SUPPORTED;
    counts->correctable_err = 5;
    counts->uncorrectable_err = index == 2;
    return 0;
}

int rsmi_dev_target_graphics_version_get(uint32_t index, uint64_t *version) {
    *version = 0x928;
    return 0;
}
