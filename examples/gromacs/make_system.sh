#!/usr/bin/env bash
# Build a small SPC/E water box for GROMACS without any download (Debian's gromacs 2022.5).
#
#   examples/gromacs/make_system.sh [DIR] [NSTEPS]
#
# DIR (default ./water) receives conf.gro (gmx solvate -cs spc216.gro, 2.5 nm cube),
# topol.top (two #includes — oplsaa force field, SPC/E water — plus [ system ] and [ molecules ]
# with the molecule count read from conf.gro; grompp needs [ system ] before [ molecules ]),
# md.mdp (plain MD, dt 2 fs, 1.0 nm cut-offs: less than half the 2.5 nm box), topol.tpr for
# `gmx` (single precision) and, when gmx_d is installed, topol_d.tpr for `gmx_d` (double).
# NSTEPS (default 2000, or $NSTEPS) is only the .tpr's default; `gmx mdrun -nsteps N` overrides it.
set -euo pipefail

dir=${1:-./water}
nsteps=${2:-${NSTEPS:-2000}}
box=${BOX:-2.5}
GMX=${GMX:-gmx}
GMX_D=${GMX_D:-gmx_d}

if ! command -v "$GMX" >/dev/null 2>&1; then
    echo "make_system.sh: '$GMX' not found — install GROMACS: apt-get install gromacs" >&2
    exit 2
fi
case $nsteps in (''|*[!0-9-]*) echo "make_system.sh: NSTEPS must be an integer, got '$nsteps'" >&2; exit 2;; esac

mkdir -p "$dir"
cd "$dir"
log=make_system.log
: > "$log"
trap 'echo "make_system.sh: failed; last lines of $PWD/$log:" >&2; tail -n 15 "$log" >&2' ERR

"$GMX" -quiet solvate -cs spc216.gro -box "$box" "$box" "$box" -o conf.gro >>"$log" 2>&1
# conf.gro: title, atom count, atoms, box. SPC/E has 3 atoms per molecule (OW HW1 HW2).
atoms=$(sed -n 2p conf.gro | tr -d ' ')
nmol=$(( atoms / 3 ))
if (( nmol <= 0 || atoms % 3 != 0 )); then
    echo "make_system.sh: unexpected atom count '$atoms' in conf.gro (see $dir/$log)" >&2
    exit 1
fi

cat > topol.top <<TOP
#include "oplsaa.ff/forcefield.itp"
#include "oplsaa.ff/spce.itp"
[ system ]
SPC/E water box
[ molecules ]
SOL $nmol
TOP

cat > md.mdp <<MDP
; plain NVT-free MD of a ${box} nm SPC/E water box (resel examples/gromacs)
integrator      = md
dt              = 0.002
nsteps          = $nsteps
cutoff-scheme   = Verlet
nstlist         = 10
rlist           = 1.0
coulombtype     = PME
rcoulomb        = 1.0
vdwtype         = Cut-off
rvdw            = 1.0
constraints     = h-bonds
constraint-algorithm = lincs
tcoupl          = no
pcoupl          = no
gen-vel         = yes
gen-temp        = 300
gen-seed        = 1
nstxout         = 0
nstvout         = 0
nstfout         = 0
nstenergy       = 0
nstlog          = 0
nstcalcenergy   = 100
MDP

"$GMX" -quiet grompp -f md.mdp -c conf.gro -p topol.top -o topol.tpr >>"$log" 2>&1
if command -v "$GMX_D" >/dev/null 2>&1; then
    "$GMX_D" -quiet grompp -f md.mdp -c conf.gro -p topol.top -o topol_d.tpr -po mdout_d.mdp >>"$log" 2>&1
fi
echo "$PWD: $nmol SPC/E waters ($atoms atoms), nsteps=$nsteps; topol.tpr$( [ -f topol_d.tpr ] && echo ' topol_d.tpr')"
