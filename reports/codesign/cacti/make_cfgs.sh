#!/usr/bin/env bash
# Writes the CACTI input files for the kbench codesign SRAM table.
# Written for kbench; contains no CACTI code or CACTI sample text.
# Usage: ./make_cfgs.sh [outdir]   (default: the directory of this script)
set -euo pipefail
out=${1:-$(cd "$(dirname "$0")" && pwd)}
# Three device flavours, named as in the csv "cell" column:
#   itrs-hp    high-performance devices for cells and periphery (default set)
#   itrs-lstp  low-standby-power devices for cells and periphery
#   lstp-hp    low-standby-power cells, high-performance periphery
for flavour in itrs-hp itrs-lstp lstp-hp; do
  case $flavour in
    itrs-hp)   cell=itrs-hp;   peri=itrs-hp;   suffix="" ;;
    itrs-lstp) cell=itrs-lstp; peri=itrs-lstp; suffix="_lstp" ;;
    lstp-hp)   cell=itrs-lstp; peri=itrs-hp;   suffix="_lstpcell" ;;
  esac
  for node in 45 32 22; do
    for kb in 8 16 32 64 128 256 512 1024; do
      tag=$kb"KB"; [ "$kb" = 1024 ] && tag=1MB
      f="$out/sram_${node}nm_${tag}${suffix}.cfg"
      cat > "$f" <<CFG
# kbench codesign: plain SRAM scratchpad, ${tag}, ${node} nm,
# ${cell} cells, ${peri} periphery.
# CACTI's "ram" mode: no tags, direct-mapped rows. One bank, one shared
# read/write port, 8-byte rows out, so reported energies are per 64-bit access.
# Key spellings follow CACTI's line parser; the word in each "(...)" or the
# " - " before a quoted value is filler that the parser needs, nothing more.
-print option "none"
-cache type "ram"
-size (bytes) $((kb*1024))
-block size (bytes) 8
-output/input bus width 64
-associativity 1
-read-write port 1
-exclusive read port 0
-exclusive write port 0
-single ended_read_ports 0
-search port 0
-UCA bank count 1
-Cache model - "UCA"
-NUCA bank count 0
-technology (u) 0.0${node}
-operating temperature (K) 350
# Device flavour for the bit cells and for the periphery (decoders, drivers,
# sense amps). The tag lines are ignored in ram mode but set the same.
-Data array cell type - "${cell}"
-Data array peripheral type - "${peri}"
-Tag array cell type - "${cell}"
-Tag array peripheral type - "${peri}"
-tag size - "default"
-access mode - "normal"
# Choose the array organisation with the smallest access time x read energy.
# In this mode CACTI does not use the weights and deviations below; they are
# given only so that no setting is left undefined.
-Optimize - "ED"
-design objective 0:0:0:100:0
-deviate 20:100000:100000:100000:100000
-NUCAdesign objective 100:100:0:0:100
-NUCAdeviate 10:10000:10000:10000:10000
-Wire signaling - "Global_30"
-Wire inside mat - "semi-global"
-Wire outside mat - "semi-global"
-Interconnect projection - "conservative"
-Core count 8
-Cache level - "L2"
# No ECC bits: the row is exactly 64 data bits.
-Add ECC - "false"
# No power gating: leakage is the always-on figure.
-Array Power Gating - "false"
-WL Power Gating - "false"
-CL Power Gating - "false"
-Bitline floating - "false"
-Interconnect Power Gating - "false"
-Power Gating Performance Loss 0.01
-Force cache config - "false"
-Ndwl 1
-Ndbl 1
-Nspd 0
-Ndcm 1
-Ndsam1 0
-Ndsam2 0
# DRAM page/burst settings: meaningless for SRAM, fixed values.
-page size (bits) 8192
-burst length 8
-internal prefetch width 8
# Every CACTI run also evaluates an off-chip DRAM link and a DRAM channel
# search, and divides by some of these numbers; give them a plain DDR3 link.
# None of it feeds our table.
-dram type - "DDR3"
-dram ecc - "NO_ECC"
-dram dimm - "UDIMM"
-io state - "READ"
-addr_timing 1.0
-mem_density 4 Gb
-bus_freq 800 MHz
-duty_cycle 1.0
-activity_dq 1.0
-activity_ca 0.5
-num_dq 72
-num_dqs 18
-num_ca 25
-num_clk 2
-num_mem_dq 2
-mem_data_width 8
-num_bobs 1
-capacity 80
-num_channels_per_bob 1
-first metric - "Cost"
-second metric - "Bandwidth"
-third metric - "Energy"
-DIMM model - "ALL"
-mirror_in_bob - "F"
-verbose - "F"
-Print level - "DETAILED"
-Print input parameters - "false"
CFG
    done
  done
done
