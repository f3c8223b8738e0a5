#!/bin/bash
# The CLI's command-line contract: unknown commands are errors (exit 2, a message naming them) even with --help;
# help for a known command and `version` exit 0.
# usage: usage.sh INFOKV_CLI
set -u
cli=$1
fail=0
expect() {  # expect STATUS [ARGS...]
  local want=$1; shift
  "$cli" "$@" >/tmp/infokv-usage.$$ 2>&1
  local got=$?
  if [ "$got" != "$want" ]; then echo "FAIL: infokv $* exited $got, want $want"; cat /tmp/infokv-usage.$$; fail=1; fi
}
expect 2 benchh --help
expect 2 nosuchcommand
expect 2 generat --model x
expect 2
expect 0 --help
expect 0 generate --help
expect 0 eval -h
expect 0 version
"$cli" benchh --help 2>&1 | grep -q "unknown command .benchh." || { echo "FAIL: no message naming the command"; fail=1; }
rm -f /tmp/infokv-usage.$$
[ $fail = 0 ] && echo "ok"
exit $fail
