# shellcheck shell=bash
# Sourced by the deploy scripts: how they print a command they run or would run.
# How a command is printed: plain words as they are, others quoted as the shell
# would need them, and a script (several lines) below its command, indented.
show() {
  local line="+" arg script=""
  for arg in "$@"; do
    if [[ "$arg" == *$'\n'* ]]; then
      line+=" '<script below>'"
      script=$arg
    elif [[ "$arg" =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then
      line+=" $arg"
    else
      line+=" $(printf '%q' "$arg")"
    fi
  done
  echo "$line"
  if [ -n "$script" ]; then
    while IFS= read -r arg; do echo "    $arg"; done <<<"$script"
  fi
}
