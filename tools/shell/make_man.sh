#!/bin/sh
# Writes man pages for loom and each of its commands from the help text the
# binary prints (`loom --help`, `loom COMMAND --help`), so the pages say
# exactly what the commands say.
#   make_man.sh LOOM OUTDIR VERSION
set -eu
loom=$1 out=$2 version=$3
mkdir -p "$out"

# roff: a leading dot or quote would be a request, and backslashes escape.
escape() { sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/"; }

page() {  # name title command...
  name=$1 title=$2
  shift 2
  help=$("$@" --help 2>&1) || true
  {
    printf '.TH %s 1 "" "loom %s" "loom manual"\n' "$(echo "$name" | tr a-z A-Z)" "$version"
    printf '.SH NAME\n%s \\- %s\n' "$name" "$title"
    printf '.SH DESCRIPTION\n.nf\n'
    printf '%s\n' "$help" | escape
    printf '.fi\n'
    if [ "$name" = loom ]; then
      printf '.SH SEE ALSO\n'
      for c in $commands; do printf '.BR loom-%s (1)\n' "$c"; done
    else
      printf '.SH SEE ALSO\n.BR loom (1)\n'
    fi
  } > "$out/$name.1"
}

# "  run        start N ranks ..." lines under "commands:".
listing=$("$loom" --help 2>&1 | awk '/^commands:/ { on = 1; next } on && /^  [a-z]/ { print } on && /^$/ { on = 0 }')
commands=$(printf '%s\n' "$listing" | awk '$1 != "help" { print $1 }')
page loom "collective communication runtime: run, perf, topo, doctor, info" "$loom"
for c in $commands; do
  title=$(printf '%s\n' "$listing" | awk -v c="$c" '$1 == c { $1 = ""; sub(/^ +/, ""); print }')
  page "loom-$c" "$title" "$loom" "$c"
done
