#!/usr/bin/env bash
# Regenerates sram.csv (and sram_detail.csv) from the .cfg files next to this
# script, using an already-built CACTI. Written for kbench; contains no CACTI code.
#
# Usage: ./run.sh /path/to/cacti-checkout-or-binary
#   CACTI opens tech_params/*.dat relative to its working directory, so each run
#   is started from the directory holding the binary. CACTI also writes
#   <cfg>.out next to its input; we give it copies in a scratch directory so
#   nothing lands here.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
arg=${1:?usage: run.sh /path/to/cacti (binary or its directory)}
if [ -d "$arg" ]; then cdir=$(cd "$arg" && pwd); else cdir=$(cd "$(dirname "$arg")" && pwd); fi
[ -x "$cdir/cacti" ] || { echo "no executable cacti in $cdir" >&2; exit 1; }
[ -d "$cdir/tech_params" ] || { echo "no tech_params/ in $cdir" >&2; exit 1; }
scratch=$(mktemp -d /tmp/kbench_cacti.XXXXXX)
trap 'rm -rf "$scratch"' EXIT

csv="$here/sram.csv"; det="$here/sram_detail.csv"
echo "node_nm,size_kb,width_bits,cell,read_pj,write_pj,leakage_mw,area_mm2,access_ns" > "$csv"
echo "node_nm,size_kb,width_bits,cell,read_pj,write_pj,leak_subthreshold_mw,leak_gate_mw,leakage_mw,area_mm2,height_mm,width_mm,access_ns,cycle_ns,ndwl,ndbl,nspd,cfg" > "$det"

# cell column: itrs-hp (hp cells + hp periphery), itrs-lstp (lstp + lstp),
# lstp-hp (lstp cells + hp periphery); see make_cfgs.sh.
for cell in itrs-hp itrs-lstp lstp-hp; do
  case $cell in itrs-hp) sfx="" ;; itrs-lstp) sfx=_lstp ;; lstp-hp) sfx=_lstpcell ;; esac
  for node in 45 32 22; do
    for kb in 8 16 32 64 128 256 512 1024; do
      tag=${kb}KB; [ "$kb" = 1024 ] && tag=1MB
      cfg="sram_${node}nm_${tag}${sfx}.cfg"
      [ -f "$here/$cfg" ] || { echo "missing $cfg" >&2; continue; }
      cp "$here/$cfg" "$scratch/$cfg"
      log="$scratch/$cfg.log"
      # The exact command for each file is: (cd <cacti dir> && ./cacti -infile <cfg>)
      ( cd "$cdir" && ./cacti -infile "$scratch/$cfg" ) > "$log" 2>&1 \
        || { echo "cacti failed on $cfg (see $log)" >&2; tail -5 "$log" >&2; exit 1; }
      awk -v node="$node" -v kb="$kb" -v cell="$cell" -v cfg="$cfg" -v csv="$csv" -v det="$det" '
        function num(s) { sub(/^[^:]*:[ \t]*/, "", s); return s + 0 }
        /^[ \t]*Access time \(ns\):/                                {acc = num($0)}
        /^[ \t]*Cycle time \(ns\):/                                 {cyc = num($0)}
        /^[ \t]*Total dynamic read energy per access \(nJ\):/       {rd = num($0)}
        /^[ \t]*Total dynamic write energy per access \(nJ\):/      {wr = num($0)}
        /^[ \t]*Total leakage power of a bank \(mW\):/ && !gotl     {lk = num($0); gotl = 1}
        /^[ \t]*Total gate leakage power of a bank \(mW\):/ && !gotg {gl = num($0); gotg = 1}
        /^[ \t]*Cache height x width \(mm\):/ {s = $0; sub(/^[^:]*:[ \t]*/, "", s); split(s, hw, " x "); h = hw[1] + 0; w = hw[2] + 0}
        /^[ \t]*Best Ndwl :/ {ndwl = num($0)}
        /^[ \t]*Best Ndbl :/ {ndbl = num($0)}
        /^[ \t]*Best Nspd :/ {nspd = num($0)}
        END {
          if (acc == 0 || rd == 0 || h == 0) { print "could not parse " cfg > "/dev/stderr"; exit 1 }
          printf "%s,%s,64,%s,%.3f,%.3f,%.5g,%.5f,%.4f\n", node, kb, cell, rd*1000, wr*1000, lk+gl, h*w, acc >> csv
          printf "%s,%s,64,%s,%.3f,%.3f,%.5g,%.5g,%.5g,%.5f,%.4f,%.4f,%.4f,%.4f,%d,%d,%d,%s\n", node, kb, cell, rd*1000, wr*1000, lk, gl, lk+gl, h*w, h, w, acc, cyc, ndwl, ndbl, nspd, cfg >> det
        }' "$log"
    done
  done
done
echo "wrote $csv and $det"
