#!/usr/bin/env bash
# Prints the statement coverage of the module per package and in total,
# from text coverage profiles (the unit tests' -coverprofile and the
# end-to-end processes' counters converted by go tool covdata textfmt), and
# fails when the total is below the floor.
#
#   hack/coverage.sh FLOOR PROFILE...
#
# A statement block counts as covered when any profile ran it, so a line
# only the built runner reached (an exit path, main's wiring) counts as
# much as one a unit test reached. Test helpers (internal/testutil, cetest,
# natstest, kafkatest and its kfake program, redistest, runner/runnertest,
# runner/conformance, .../udftest, e2e/numaflow/internal/nfdaemon: Numaflow's
# generated daemon client; e2e/cluster/internal: the cluster tests' own
# containers) and the hack/ programs are left out:
# they are not what users run. So is the MonoVertex API's generated code
# (internal/client and zz_generated.deepcopy.go, hack/codegen.sh): written
# by client-gen and injection-gen, not by us.
set -euo pipefail
floor=$1; shift
module=github.com/monovertex/monovertex
awk -v module="$module/" -v floor="$floor" '
  /^mode:/ { next }
  NF == 3 {
    # file:startline.col,endline.col numstmt count
    block = $1; stmts[block] = $2
    if ($3 > 0) hit[block] = 1
  }
  END {
    for (b in stmts) {
      file = b; sub(/:.*/, "", file)
      pkg = file; sub(/\/[^\/]*$/, "", pkg); sub("^" module, "", pkg)
      if (pkg ~ /^internal\/(testutil|cetest|natstest|redistest|kafkatest|kafkatest\/cmd\/kfake)$|^runner\/(runnertest|conformance)$|udftest$|^e2e\/numaflow\/internal\/nfdaemon$|^e2e\/cluster\/internal\/|^hack\/|^internal\/client\//) continue
      if (file ~ /\/zz_generated\.deepcopy\.go$/) continue
      all[pkg] += stmts[b]; total += stmts[b]
      if (b in hit) { cov[pkg] += stmts[b]; covered += stmts[b] }
    }
    for (p in all) printf "%-45s %6.1f%%  (%d/%d statements)\n", p, 100 * cov[p] / all[p], cov[p], all[p] | "sort"
    close("sort")
    pct = 100 * covered / total
    printf "%-45s %6.1f%%  (%d/%d statements)\n", "total", pct, covered, total
    if (pct < floor) {
      printf "coverage %.1f%% is below the floor of %.1f%% (hack/test.sh COVERAGE_FLOOR): add tests for what you added\n", pct, floor
      exit 1
    }
  }' "$@"
