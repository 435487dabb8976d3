#!/usr/bin/env bash
# Offline proof of the deploy path: builds the pinned ko (hack/tools/go.mod),
# runs `ko resolve` on every example under deploy/ against an OCI registry on
# 127.0.0.1 with a minimal non-root base image, checks that every ko://
# reference became an image there, runs the runner binary from its image with
# --version, and validates every Knative Service with knative.dev/serving's
# own defaulting and validation. Needs Go and git; no Docker, no cluster.
#
#   bash hack/ko-proof.sh            # everything (about 30s warm, a few minutes cold)
#   bash hack/ko-proof.sh -short     # only the manifest checks, no ko builds
#   MV_KO_PROOF_CLONE=1 bash hack/ko-proof.sh   # build a fresh clone of HEAD
#   MV_KO_PROOF_OUT=/tmp/resolved bash hack/ko-proof.sh   # keep ko's output
#
# hack/tools is its own Go module, so ko, go-containerregistry and
# knative.dev/serving stay out of the runner's go.mod. -count=1 because the
# test reads files outside its module (deploy/, the runner's sources) that
# go test's cache does not track.
set -euo pipefail
cd "$(dirname "$0")/tools"
exec go test -count=1 -timeout 30m "$@" ./...
