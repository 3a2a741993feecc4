"""Thin typer commands that call the stages.

commands    the command table (COMMANDS): which module registers which commands
main        the ``hetflow`` command, light: bash's first-word completion from the table;
            the rest goes to
app         the typer app: --version, validate, nodes; registers each command module on first use
common, flags, helptext, shell   what the commands share: consoles, the store, -p parsing,
            help as docker and kubectl users read it, shell completion
run/        the commands of a run: runs (run, resume, ps, show, stop), logs, record (trace,
            report), moves (migrate, drain), doctor, cache
planning/   plan (plan, simulate, cluster plan, profile show, import), slowdown
oci/        images (inspect, resolve, build-index), registry (serve, login)
ui          ``hetflow ui``: the live dashboard
"""
