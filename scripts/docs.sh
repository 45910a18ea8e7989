#!/usr/bin/env bash
# Serve the docs site (docs/, mkdocs.yml) on 127.0.0.1 with live reload, from this checkout's
# venv (scripts/setup.sh makes it). Arguments go to mkdocs serve (-a 127.0.0.1:8001: another
# port). The site's path is site_url's, so the pages are under /hermes-envgen/.
#   bash scripts/docs.sh             http://127.0.0.1:8000/hermes-envgen/
#   bash scripts/docs.sh build DIR   the site as CI builds it (--strict), into DIR; a warning
#                                    (a broken link, a missing page) fails it
set -euo pipefail
cd "$(dirname "$0")/.."
if ! [ -x .venv/bin/mkdocs ]; then
    echo "error: no .venv/bin/mkdocs: run \`bash scripts/setup.sh\` first" >&2
    exit 1
fi
export NO_MKDOCS_2_WARNING=1  # mkdocs-material's notice about its successor, on every build
if [ "${1:-}" = build ]; then
    site_dir="${2:?usage: scripts/docs.sh build DIR}"
    shift 2
    exec .venv/bin/mkdocs build --strict --site-dir "$site_dir" "$@"
fi
exec .venv/bin/mkdocs serve --strict -a 127.0.0.1:8000 "$@"
