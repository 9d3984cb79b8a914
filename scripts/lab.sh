#!/usr/bin/env bash
# Open the lessons in JupyterLab with the project's kernel (`make lab` sets up first).
#
# Registers the kernel "Python (kerasdist)" (name kerasdist, the kernel the lessons ask for) inside
# .venv, so it does not touch your own Jupyter; KERASDIST_KERNEL=user registers it for your user
# instead. Arguments go to `jupyter lab` (e.g. --port 8890 --no-browser); it prints the URL to open.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${KERASDIST_KERNEL:-env}" in
    env) where=--sys-prefix ;;
    user) where=--user ;;
    *) echo "kerasdist: error: KERASDIST_KERNEL must be env or user. Received: KERASDIST_KERNEL=$KERASDIST_KERNEL;" \
            "unset it to register the kernel inside .venv" >&2
       exit 2 ;;
esac
[ -x .venv/bin/jupyter-lab ] || { echo "kerasdist: error: JupyterLab is not in .venv; run make lab" >&2; exit 2; }
.venv/bin/python -m ipykernel install "$where" --name kerasdist --display-name "Python (kerasdist)" >/dev/null
# nbgrader (kerasdist course: the instructor's editions) adds its own JupyterLab tools; a student reading the
# lessons needs none of them, and its formgrader would complain that notebooks/ is not an nbgrader course.
.venv/bin/jupyter server extension disable --sys-prefix nbgrader.server_extensions.formgrader \
    nbgrader.server_extensions.course_list nbgrader.server_extensions.assignment_list \
    nbgrader.server_extensions.validate_assignment >/dev/null 2>&1
.venv/bin/jupyter labextension disable --level=sys_prefix @jupyter/nbgrader >/dev/null 2>&1
echo "Kernel \"Python (kerasdist)\" registered (${where#--}); starting JupyterLab on notebooks/ ..."
root=()
[ "$(id -u)" = 0 ] && root=(--allow-root)  # Jupyter refuses root without it (containers, CI)
# news_url=None: no "get notified about official Jupyter news?" prompt over the first lesson.
exec .venv/bin/jupyter lab --ServerApp.root_dir=notebooks --ServerApp.ip=127.0.0.1 --LabApp.news_url=None \
    "${root[@]}" "$@"
