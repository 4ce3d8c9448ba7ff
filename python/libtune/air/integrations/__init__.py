"""``ray.air.integrations``' spellings: the modules of libtune.integrations."""
