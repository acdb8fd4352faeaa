/* A stand-in libcndev.so with the CNDev calls the Cambricon detector makes: two MLU370-X8
 * cards. Versioned structs must declare CNDEV_VERSION_6, as the real library demands; card 1
 * reports an unhealthy state. */
#include <stdint.h>
#include <string.h>

#define VERSION_6 6
#define UNSUPPORTED_API_VERSION 8

typedef struct { int version; unsigned int number; } cndevCardInfo_t;
typedef struct { int version; uint8_t uuid[37]; uint64_t ncsUUID64; } cndevUUID_t;
typedef struct {
    int64_t physicalMemoryTotal, physicalMemoryUsed, reservedMemory;
    int64_t virtualMemoryTotal, virtualMemoryUsed;
    uint64_t globalMemory;
    uint64_t reserved[16];
} cndevMemoryInfoV2_t;
typedef struct {
    int version;
    unsigned int mcuMajorVersion, mcuMinorVersion, mcuBuildVersion;
    unsigned int driverMajorVersion, driverMinorVersion, driverBuildVersion;
} cndevVersionInfo_t;
typedef struct {
    unsigned int subsystemId, deviceId;
    uint16_t vendor, subsystemVendor;
    unsigned int domain, bus, device, function;
    uint16_t moduleId, slotId;
    unsigned int reserved[8];
} cndevPCIeInfoV2_t;
typedef struct {
    char msg[512];
    unsigned int id, bdf, code, category, severity;
} cndevDiagErrorDetail_t;
typedef struct { unsigned int system, health; cndevDiagErrorDetail_t error; } cndevIncidentInfo_t;
typedef struct {
    int health;
    unsigned int deviceState, driverState, overallHealth, count;
    cndevIncidentInfo_t incidents[64];
    unsigned int reserved[8];
} cndevCardHealthStateV2_t;

int cndevInit(int reserved) { return reserved == 0 ? 0 : 1; }

int cndevGetDeviceCount(cndevCardInfo_t *info) {
    if (info->version != VERSION_6) return UNSUPPORTED_API_VERSION;
    info->number = 2;
    return 0;
}

int cndevGetDeviceHandleByIndex(int index, int *handle) {
    if (index < 0 || index > 1) return 1;
    *handle = 40 + index;
    return 0;
}

int cndevGetUUID(cndevUUID_t *info, int handle) {
    if (info->version != VERSION_6) return UNSUPPORTED_API_VERSION;
    strcpy((char *)info->uuid, handle == 40 ? "7c4b6f2a-3e91-4d0a-8b5e-2f6c9d1a0e37"
                                            : "1d2e3f40-5a6b-4c7d-8e9f-0a1b2c3d4e5f");
    info->ncsUUID64 = 0;
    return 0;
}

int cndevGetPCIeInfoV2(cndevPCIeInfoV2_t *info, int handle) {
    memset(info, 0, sizeof(*info));
    info->vendor = 0xcabc;
    info->domain = 0;
    info->bus = handle == 40 ? 0x1a : 0x3d;
    return 0;
}

const char *cndevGetCardNameStringByDevId(int handle) { return "MLU370-X8"; }

int cndevGetMemoryUsageV2(cndevMemoryInfoV2_t *info, int handle) {
    memset(info, 0, sizeof(*info));
    info->physicalMemoryTotal = 49152;
    info->physicalMemoryUsed = handle == 40 ? 1024 : 40960;
    return 0;
}

int cndevGetCardHealthStateV2(cndevCardHealthStateV2_t *info, int handle) {
    memset(info, 0, sizeof(*info));
    info->health = handle == 40 ? 1 : 0;
    return 0;
}

int cndevGetVersionInfo(cndevVersionInfo_t *info, int handle) {
    if (info->version != VERSION_6) return UNSUPPORTED_API_VERSION;
    info->driverMajorVersion = 5;
    info->driverMinorVersion = 10;
    info->driverBuildVersion = 22;
    return 0;
}
