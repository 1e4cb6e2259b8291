#!/usr/bin/env bash
# Checks the machine code of the kernels whose (mangled) names match a pattern in a binary or object file:
# per kernel, the HGMMA/QGMMA count (wgmma in SASS, 16-bit / FP8: the tensor-core path of Hopper),
# local-memory traffic (LDL/STL: spills or a register array indexed at run time) and the resource usage
# (registers, stack, shared memory; what -Xptxas -v reports at build time). Fails when a matched kernel has
# no HGMMA/QGMMA or any LDL/STL before its producer's setmaxnreg.dec (USETMAXREG.DEALLOC: the code after it
# is the producer warpgroup's, which may keep a word or two of its per-work-tile state in local memory,
# loaded once per work tile; its count is reported, not failed), or when nothing matches.
# Usage: scripts/sass-check.sh BINARY [NAME_REGEX [MIN_OVERLAP_EX2]]   (default regex: the sm90 forward
# kernels without softcap/ALiBi; the general instances' producers spill more (24 registers), docs/kernels.md,
# "Persistent grid")
# MIN_OVERLAP_EX2: also fail a kernel unless some stretch between a `WARPGROUP.DEPBAR.LE gsb0, 0x1` and the
# next `gsb0, 0x0` holds at least that many MUFU.EX2: a softmax that runs while the last product is still on
# the tensor cores (the FP8 forward's loop). ptxas hoists such a wait above independent work unless the
# source holds it (wgmma::hold_wait_after), and nothing else shows when it does.
# cuobjdump comes from the CUDA toolkit, or from the triton wheel when the toolkit is absent ($CUOBJDUMP
# overrides both).
set -uo pipefail
bin=$1
pattern=${2:-_ZN9flashattn6detail4cuda4sm9010fwd_kernelI[^ ]*Lb0EE}
min_ex2=${3:-0}
cuobjdump=${CUOBJDUMP:-$(command -v cuobjdump || true)}
if [ -z "$cuobjdump" ]; then
  cuobjdump=$(python3 -c 'import os, triton; print(os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump"))' 2>/dev/null)
fi
[ -x "$cuobjdump" ] || { echo "sass-check: no cuobjdump (set CUOBJDUMP)" >&2; exit 2; }
sass=$(mktemp)
trap 'rm -f "$sass"' EXIT
"$cuobjdump" --dump-sass "$bin" >"$sass" || exit 2
# One line per kernel: name, HGMMA count, LDL/STL count, the most MUFU.EX2 between a wait for all but one
# product group and the next wait for all (the SASS of a function runs from its "Function : name" line to
# the next one).
report=$(awk -v pat="$pattern" '
  /Function : / { if (name != "") print name, hgmma, local, best, plocal; name = ""; if ($0 ~ pat) { name = $NF; hgmma = 0; local = 0; best = 0; open = 0; prod = 0; plocal = 0 } next }
  name != "" && /USETMAXREG\.DEALLOC/ { prod = 1 }
  name != "" && /[HQ]GMMA/ { hgmma++ }
  name != "" && /[^A-Z](LDL|STL)[. ]/ { if (prod) plocal++; else local++ }
  name != "" && /WARPGROUP\.DEPBAR\.LE gsb0, 0x1/ { open = 1; ex2 = 0 }
  name != "" && open && /MUFU\.EX2/ { ex2++ }
  name != "" && /WARPGROUP\.DEPBAR\.LE gsb0, 0x0/ { if (open && ex2 > best) best = ex2; open = 0 }
  END { if (name != "") print name, hgmma, local, best, plocal }' "$sass")
if [ -z "$report" ]; then
  echo "sass-check: no kernel matches $pattern in $bin" >&2
  exit 1
fi
echo "kernel HGMMA LDL/STL EX2-between-waits producer-LDL/STL"
echo "$report"
echo "resource usage:"
"$cuobjdump" --dump-resource-usage "$bin" 2>/dev/null | grep -A1 -E "$pattern" | grep -E "Function|REG"
echo "$report" | awk -v min_ex2="$min_ex2" '$2 == 0 || $3 > 0 || $4 < min_ex2 {
  bad = 1; print "sass-check: " $1 ": " $2 " HGMMA, " $3 " LDL/STL, " $4 " MUFU.EX2 between waits (at least " min_ex2 " expected)" }
  END { exit bad }'
