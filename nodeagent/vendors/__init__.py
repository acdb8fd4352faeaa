"""One package per manufacturer (`nodeagent/vendors/<mfr>/`) behind one small interface.

Each manufacturer's package holds its bindings, detector, partition detection, Allocate
responder (grants and isolation), partition driver and simulator, and registers itself with one
`Vendor` (`<mfr>/vendor.py`) listed in `registry.VENDORS`. `common/` holds what several
manufacturers share (the NVML family, DRM nodes, HAMi-core staging, KFD topology); no vendor
package imports another. The engine (`nodeagent.detect`, `nodeagent.plugin`) reaches a
manufacturer only through the registry (docs/adding-a-manufacturer.md).
"""
