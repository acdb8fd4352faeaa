/* A stand-in libmxsml.so with the MXSML calls the MetaX detector makes: two MXC500 cards and an
 * SR-IOV virtual function. Card 1 counts an uncorrectable DRAM error. */
#include <string.h>

typedef struct {
    unsigned int deviceId, type;
    char bdfId[32];
    unsigned int gpuId, nodeId;
    char uuid[96];
    unsigned int brand, mode;
    char deviceName[32];
} mxSmlDeviceInfo_t;

typedef struct { long visVramTotal, visVramUse, vramTotal, vramUse, xttTotal, xttUse; } mxSmlMemoryInfo_t;
typedef struct { unsigned int sramCE, sramUE, dramCE, dramUE, retiredPage; } mxSmlEccErrorCount_t;

static int initialised;

int mxSmlInit(void) {
    initialised = 1;
    return 0;
}

unsigned int mxSmlGetDeviceCount(void) { return initialised ? 3 : 0; }

int mxSmlGetDeviceInfo(unsigned int index, mxSmlDeviceInfo_t *info) {
    static const char *buses[] = {"0000:0e:00.0", "0000:0f:00.0", "0000:0f:00.1"};
    if (index > 2) return 5; /* InvalidDeviceId */
    memset(info, 0, sizeof(*info));
    info->deviceId = index;
    strcpy(info->bdfId, buses[index]);
    strcpy(info->uuid, index == 0 ? "GPU-3e1b007a-90c2-58d4-1f6e-a7b8c9d0e1f0"
                                  : "GPU-3e1b017a-90c2-58d4-1f6e-a7b8c9d0e1f1");
    info->brand = 2; /* C */
    info->mode = index == 2 ? 2 : 0;
    strcpy(info->deviceName, "MXC500");
    return 0;
}

int mxSmlGetMemoryInfo(unsigned int index, mxSmlMemoryInfo_t *info) {
    memset(info, 0, sizeof(*info));
    info->vramTotal = 67108864; /* KiB */
    info->vramUse = 858112;
    return 0;
}

int mxSmlGetTotalEccErrors(unsigned int index, mxSmlEccErrorCount_t *counts) {
    memset(counts, 0, sizeof(*counts));
    counts->dramCE = 4;
    counts->dramUE = index == 1;
    return 0;
}

int mxSmlGetDeviceVersion(unsigned int index, unsigned int unit, char *version, unsigned int *length) {
    if (unit != 1 || *length < 16) return 10; /* InsufficientSize */
    strcpy(version, "2.12.13");
    *length = 7;
    return 0;
}

int mxSmlGetMacaVersion(char *version, unsigned int *length) {
    if (*length < 16) return 10;
    strcpy(version, "2.29.0.19");
    *length = 9;
    return 0;
}
