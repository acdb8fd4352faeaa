/* A stand-in libdcmi.so with the DCMI entry points and structs the Ascend detector reads.
 *
 * Built three ways (see test_bindings.py):
 *   default       a V1 driver with the newer `_v2` queries: card 0 holds an NPU and its MCU,
 *                 card 1 one NPU; NPU 1 counts a double-bit HBM error;
 *   -DDCMI_OLD    a V1 driver with only the older queries (no `_v2` die, PCIe and chip calls,
 *                 no HBM: memory from the first-version memory query);
 *   -DDCMI_V2     an A5 driver serving only the V2 generation (devices listed flat; the
 *                 virtual die refused, the DDie answering): device 0 on a training board of a
 *                 two-dimension super pod, device 1 on a four-chip inference card's board.
 *
 * Every build answers the chip information's super-pod record (main command 12, sub command 1)
 * in the 48-byte `dcmi_spod_info`, whose product type is the byte at offset 20.
 */
#include <string.h>

#define NOT_SUPPORTED (-8255)
#define MAIN_CMD_CHIP_INF 12
#define SUPER_POD_INFO 1

struct dcmi_spod_info {
    unsigned int sdid, scale_type, super_pod_id, server_id, chassis_id;
    unsigned char super_pod_type;
    unsigned char reserve[27];
};

static int super_pod(int main_cmd, unsigned int sub_cmd, void *buf, unsigned int *size) {
    if (main_cmd != MAIN_CMD_CHIP_INF || sub_cmd != SUPER_POD_INFO) return NOT_SUPPORTED;
    if (*size < sizeof(struct dcmi_spod_info)) return -8001;
    struct dcmi_spod_info *info = buf;
    memset(info, 0xff, sizeof(*info));
    info->super_pod_type = 2;
    memset(info->reserve, 0, sizeof(info->reserve));
    *size = sizeof(*info);
    return 0;
}

struct dcmi_chip_info {
    unsigned char chip_type[32];
    unsigned char chip_name[32];
    unsigned char chip_ver[32];
    unsigned int aicore_cnt;
};

struct dcmi_chip_info_v2 {
    unsigned char chip_type[32];
    unsigned char chip_name[32];
    unsigned char chip_ver[32];
    unsigned int aicore_cnt;
    unsigned char npu_name[32];
};

struct dcmi_pcie_info {
    unsigned int deviceid, venderid, subvenderid, subdeviceid;
    unsigned int bdf_deviceid, bdf_busid, bdf_funcid;
};

struct dcmi_pcie_info_all {
    unsigned int venderid, subvenderid, deviceid, subdeviceid;
    int domain;
    unsigned int bdf_busid, bdf_deviceid, bdf_funcid;
    unsigned char reserve[32];
};

struct dcmi_die_id { unsigned int soc_die[5]; };

struct dcmi_hbm_info {
    unsigned long long memory_size;
    unsigned int freq;
    unsigned long long memory_usage;
    int temp;
    unsigned int bandwith_util_rate;
};

struct dcmi_memory_info_stru { unsigned long long memory_size; unsigned int freq, utiliza; };

struct dcmi_ecc_info {
    int enable_flag;
    unsigned int single_bit_error_cnt, double_bit_error_cnt;
    unsigned int total_single_bit_error_cnt, total_double_bit_error_cnt;
    unsigned int single_bit_isolated_pages_cnt, double_bit_isolated_pages_cnt;
};

static void chip(struct dcmi_chip_info_v2 *info, const char *name, unsigned int cores) {
    memset(info, 0, sizeof(*info));
    strcpy((char *)info->chip_type, "Ascend");
    strcpy((char *)info->chip_name, name);
    strcpy((char *)info->chip_ver, "V1");
    info->aicore_cnt = cores;
}

static void die(struct dcmi_die_id *id, int npu) {
    for (int word = 0; word < 5; word++) id->soc_die[word] = 0xA0000000u + 0x100 * npu + word;
}

#if defined(DCMI_V2)

int dcmiv2_init(void) { return 0; }

int dcmiv2_get_device_list(int *list, int *count, int length) {
    if (length < 2) return -8001;
    list[0] = 0;
    list[1] = 1;
    *count = 2;
    return 0;
}

int dcmiv2_get_device_type(int dev, int *type) {
    if (dev < 0 || dev > 1) return -8001;
    *type = 0;
    return 0;
}

int dcmiv2_get_device_die_id(int dev, int type, struct dcmi_die_id *id) {
    if (type != 2) return NOT_SUPPORTED; /* only the DDie identifies an A5 chip */
    die(id, 10 + dev);
    return 0;
}

int dcmiv2_get_device_pcie_info(int dev, struct dcmi_pcie_info_all *info) {
    memset(info, 0, sizeof(*info));
    info->domain = 0;
    info->bdf_busid = 0x1a + dev;
    return 0;
}

int dcmiv2_get_device_chip_info(int dev, struct dcmi_chip_info_v2 *info) {
    chip(info, "950PR", 32);
    return 0;
}

int dcmiv2_get_device_hbm_info(int dev, struct dcmi_hbm_info *info) {
    memset(info, 0, sizeof(*info));
    info->memory_size = 131072;
    info->memory_usage = 1024;
    return 0;
}

int dcmiv2_get_device_ecc_info(int dev, int type, struct dcmi_ecc_info *info) {
    return NOT_SUPPORTED;
}

int dcmiv2_get_chip_phy_id_by_dev_id(unsigned int dev, unsigned int *physical) {
    *physical = 8 + dev;
    return 0;
}

int dcmiv2_get_mainboard_id(int dev, unsigned int *mainboard) {
    *mainboard = dev == 0 ? 0x44 : 0x6c;
    return 0;
}

int dcmiv2_get_device_info(int dev, int main_cmd, unsigned int sub_cmd, void *buf,
                           unsigned int *size) {
    (void)dev;
    return super_pod(main_cmd, sub_cmd, buf, size);
}

#else

int dcmi_init(void) { return 0; }

int dcmi_get_driver_version(char *version, unsigned int length) {
    strncpy(version, "24.1.rc2", length);
    return 0;
}

int dcmi_get_card_list(int *count, int *list, int length) {
    if (length < 2) return -8001;
    list[0] = 0;
    list[1] = 1;
    *count = 2;
    return 0;
}

int dcmi_get_device_num_in_card(int card, int *count) {
    *count = card == 0 ? 2 : 1;
    return 0;
}

int dcmi_get_device_type(int card, int dev, int *type) {
    *type = (card == 0 && dev == 1) ? 1 /* MCU */ : 0;
    return 0;
}

int dcmi_get_device_logic_id(int *logic, int card, int dev) {
    *logic = card;
    return 0;
}

int dcmi_get_device_phyid_from_logicid(unsigned int logic, unsigned int *physical) {
    *physical = logic + 4;
    return 0;
}

int dcmi_get_device_info(int card, int dev, int main_cmd, unsigned int sub_cmd, void *buf,
                         unsigned int *size) {
    (void)card;
    (void)dev;
    return super_pod(main_cmd, sub_cmd, buf, size);
}

int dcmi_get_device_ecc_info(int card, int dev, int type, struct dcmi_ecc_info *info) {
    memset(info, 0, sizeof(*info));
    info->enable_flag = 1;
    info->double_bit_error_cnt = card == 1 && type == 2;
    return 0;
}

#if defined(DCMI_OLD)

int dcmi_get_device_die(int card, int dev, struct dcmi_die_id *id) {
    die(id, card);
    return 0;
}

int dcmi_get_device_pcie_info(int card, int dev, struct dcmi_pcie_info *info) {
    memset(info, 0, sizeof(*info));
    info->bdf_busid = 0x3b + card;
    info->bdf_deviceid = 0;
    info->bdf_funcid = 0;
    return 0;
}

int dcmi_get_device_chip_info(int card, int dev, struct dcmi_chip_info *info) {
    struct dcmi_chip_info_v2 newer;
    chip(&newer, "310P3", 8);
    memcpy(info, &newer, sizeof(*info));
    return 0;
}

int dcmi_get_device_hbm_info(int card, int dev, struct dcmi_hbm_info *info) {
    return NOT_SUPPORTED;
}

int dcmi_get_memory_info(int card, int dev, struct dcmi_memory_info_stru *info) {
    info->memory_size = 44280;
    info->freq = 3200;
    info->utiliza = 2;
    return 0;
}

#else

int dcmi_get_device_die_v2(int card, int dev, int type, struct dcmi_die_id *id) {
    if (type != 1) return NOT_SUPPORTED;
    die(id, card);
    return 0;
}

int dcmi_get_device_pcie_info_v2(int card, int dev, struct dcmi_pcie_info_all *info) {
    memset(info, 0, sizeof(*info));
    info->domain = 0;
    info->bdf_busid = card == 0 ? 0xc1 : 0x01;
    return 0;
}

int dcmi_get_device_chip_info_v2(int card, int dev, struct dcmi_chip_info_v2 *info) {
    chip(info, "910B3", 20);
    strcpy((char *)info->npu_name, "910B3");
    return 0;
}

int dcmi_get_device_hbm_info(int card, int dev, struct dcmi_hbm_info *info) {
    memset(info, 0, sizeof(*info));
    info->memory_size = 65536;
    info->memory_usage = 3349 + card;
    return 0;
}

#endif
#endif
