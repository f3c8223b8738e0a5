#!/bin/bash
# The CLI's command-line contract: unknown commands are errors (exit 2, a message naming them) even with --help;
# help for a known command and `version` exit 0.
# Text is text: tokenize keeps "<|im_start|>" as characters unless --special.
# usage: usage.sh INFOKV_CLI SMOLLM2_GGUF
set -u
cli=$1
smollm2=${2:-}
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
expect 0 version --json
expect 2 version --bogus
"$cli" benchh --help 2>&1 | grep -q "unknown command .benchh." || { echo "FAIL: no message naming the command"; fail=1; }
# every command takes --json: version's is an object, chat's one object per turn
"$cli" version --json | python3 -c 'import json, sys; d = json.load(sys.stdin); assert d["version"] and d["version_number"] > 0' \
  || { echo "FAIL: version --json is not a JSON object"; fail=1; }
printf '' | "$cli" chat --json >/dev/null 2>/tmp/infokv-usage.$$
if grep -q "unknown option" /tmp/infokv-usage.$$; then echo "FAIL: chat --json is an unknown option"; fail=1; fi
# text is text unless --special (SmolLM2's <|im_start|> is id 1)
if [ ! -f "$smollm2" ]; then
  echo "FAIL: SmolLM2 GGUF missing: '$smollm2' (packaging/fetch_models.sh)"; fail=1
else
  plain=$("$cli" tokenize --model "$smollm2" --text '<|im_start|>user' --json)
  special=$("$cli" tokenize --model "$smollm2" --text '<|im_start|>user' --json --special)
  python3 - "$plain" "$special" <<'PY' || { echo "FAIL: tokenize --special: $plain / $special"; fail=1; }
import json, sys
plain, special = (json.loads(a)["ids"] for a in sys.argv[1:3])
assert 1 not in plain and len(plain) > 2, plain
assert special[0] == 1 and len(special) == 2, special
PY
  expect 2 tokenize --model "$smollm2" --text x --special --no-special
fi
# without --model and without the default model, the message says what to do (not a bare "cannot open")
(cd /tmp && env -u INFOKV_MODELS_DIR "$cli" generate --prompt x --max-tokens 1 >/dev/null 2>/tmp/infokv-usage.$$)
grep -q "the default model .* is not there.*pass --model PATH" /tmp/infokv-usage.$$ || { echo "FAIL: no-default-model message:"; cat /tmp/infokv-usage.$$; fail=1; }
rm -f /tmp/infokv-usage.$$
[ $fail = 0 ] && echo "ok"
exit $fail
