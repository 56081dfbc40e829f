"""ASIC co-design: a systolic attention datapath modelled bit-accurately against the Q15 contract."""
