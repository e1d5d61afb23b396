#!/usr/bin/env bash
# One device call that is useful on either Hopper: on an H200 the H200 files (h200_benches.sh: the
# attention benches, the compressor's record, the portable benches); on any other GPU that GPU's
# compressor record and memcheck (compress_record_run.sh).
# There (carry the archive): bash bench/probes/record_run.sh build-pk/NAME.tar.xz
set -u
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in
  *H200*) exec bash "$(dirname "$0")/h200_benches.sh" "$@" ;;
  *) exec bash "$(dirname "$0")/compress_record_run.sh" "$@" ;;
esac
