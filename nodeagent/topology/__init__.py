"""How the devices of one node reach each other: cards and network cards on the PCIe tree, and
card-to-card fabrics (docs/topology.md). Manufacturer-neutral: a vendor package reports its
cards' direct links, this package classifies every pair and chooses well-connected card sets."""
