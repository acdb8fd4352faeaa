/*
 * The testbed's stand-in for a slice isolation library (HAMi-core's libvgpu.so on a GPU node),
 * compiled with cc by testbed/standin.py (as libvgpu.so for the real nodes' image, and under
 * each name a host-process agent's grants preload), and staged onto the real nodes by the
 * chain's own init container, from an image laid out as HAMi's is (testbed/images.py).
 *
 * It is a real shared object with the library's soname, so the agent's check (an ELF of this
 * machine that dlopen accepts) and a sliced container's dynamic loader treat it as they would
 * the real one. It enforces nothing: there is no card. What it does is say that it was loaded:
 * its constructor runs in every process the loader preloads it into and sets
 * GPUSTACK_ISOLATION_STANDIN=loaded in that process's environment, which a test reads from the
 * container (beside /proc/self/maps, which names the mapped file).
 */
#include <stdlib.h>

__attribute__((constructor)) static void gpustack_standin_loaded(void)
{
    setenv("GPUSTACK_ISOLATION_STANDIN", "loaded", 1);
}
