"""InstanceType status (the four views) and InstanceType admission (defaulting, validation)."""
