// tokenizer_bpe.c — GPT-2 byte-level BPE: loading encoder.json + vocab.bpe (or Hugging Face's
// vocab.json + merges.txt), the GPT-2 pre-tokenizer, the rank-ordered merge loop, a per-word
// cache, and saving the two files back.
//
// Files. encoder.json maps token -> id, where a token's bytes are written with GPT-2's
// byte-to-unicode alphabet: the printable bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF stand for
// themselves and the other 68 bytes, in increasing order, are U+0100..U+0143 (so a space is
// "Ġ" U+0120). vocab.bpe has an optional "#version" line and then one merge "a b" per line;
// the line order is the merge rank (earlier merges first). Internally tokens are raw bytes.
//
// Encoding a text: the pre-tokenizer cuts it into words exactly as GPT-2's regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// does (first alternative that matches at each position, greedy), then each word starts as
// one token per byte and the adjacent pair with the lowest merge rank is merged (all of its
// occurrences, left to right) until no adjacent pair has a rank.
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "../common.h"
#include "tokenizer.h"

// ---------------------------------------------------------------------------------------------
// Unicode classes for the pre-tokenizer, with JavaScript's (ECMAScript) semantics, which the
// reference implementation (npm gpt-3-encoder) uses: \s is [\t\n\v\f\r \u00a0\u1680
// \u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]; \p{L} and \p{N} are the general
// categories L* and N*. The ranges of non-ASCII letters and numbers below were generated
// (Unicode 17, node 20) by testing every code point against /\p{L}/u and /\p{N}/u:
//   for (c = 0x80; c <= 0x10FFFF; c++) classify String.fromCodePoint(c), merge equal runs.

// clang-format off
static const uint32_t letter_ranges[][2] = {
    {0xaa, 0xaa}, {0xb5, 0xb5}, {0xba, 0xba}, {0xc0, 0xd6}, {0xd8, 0xf6}, {0xf8, 0x2c1},
    {0x2c6, 0x2d1}, {0x2e0, 0x2e4}, {0x2ec, 0x2ec}, {0x2ee, 0x2ee}, {0x370, 0x374}, {0x376, 0x377},
    {0x37a, 0x37d}, {0x37f, 0x37f}, {0x386, 0x386}, {0x388, 0x38a}, {0x38c, 0x38c}, {0x38e, 0x3a1},
    {0x3a3, 0x3f5}, {0x3f7, 0x481}, {0x48a, 0x52f}, {0x531, 0x556}, {0x559, 0x559}, {0x560, 0x588},
    {0x5d0, 0x5ea}, {0x5ef, 0x5f2}, {0x620, 0x64a}, {0x66e, 0x66f}, {0x671, 0x6d3}, {0x6d5, 0x6d5},
    {0x6e5, 0x6e6}, {0x6ee, 0x6ef}, {0x6fa, 0x6fc}, {0x6ff, 0x6ff}, {0x710, 0x710}, {0x712, 0x72f},
    {0x74d, 0x7a5}, {0x7b1, 0x7b1}, {0x7ca, 0x7ea}, {0x7f4, 0x7f5}, {0x7fa, 0x7fa}, {0x800, 0x815},
    {0x81a, 0x81a}, {0x824, 0x824}, {0x828, 0x828}, {0x840, 0x858}, {0x860, 0x86a}, {0x870, 0x887},
    {0x889, 0x88f}, {0x8a0, 0x8c9}, {0x904, 0x939}, {0x93d, 0x93d}, {0x950, 0x950}, {0x958, 0x961},
    {0x971, 0x980}, {0x985, 0x98c}, {0x98f, 0x990}, {0x993, 0x9a8}, {0x9aa, 0x9b0}, {0x9b2, 0x9b2},
    {0x9b6, 0x9b9}, {0x9bd, 0x9bd}, {0x9ce, 0x9ce}, {0x9dc, 0x9dd}, {0x9df, 0x9e1}, {0x9f0, 0x9f1},
    {0x9fc, 0x9fc}, {0xa05, 0xa0a}, {0xa0f, 0xa10}, {0xa13, 0xa28}, {0xa2a, 0xa30}, {0xa32, 0xa33},
    {0xa35, 0xa36}, {0xa38, 0xa39}, {0xa59, 0xa5c}, {0xa5e, 0xa5e}, {0xa72, 0xa74}, {0xa85, 0xa8d},
    {0xa8f, 0xa91}, {0xa93, 0xaa8}, {0xaaa, 0xab0}, {0xab2, 0xab3}, {0xab5, 0xab9}, {0xabd, 0xabd},
    {0xad0, 0xad0}, {0xae0, 0xae1}, {0xaf9, 0xaf9}, {0xb05, 0xb0c}, {0xb0f, 0xb10}, {0xb13, 0xb28},
    {0xb2a, 0xb30}, {0xb32, 0xb33}, {0xb35, 0xb39}, {0xb3d, 0xb3d}, {0xb5c, 0xb5d}, {0xb5f, 0xb61},
    {0xb71, 0xb71}, {0xb83, 0xb83}, {0xb85, 0xb8a}, {0xb8e, 0xb90}, {0xb92, 0xb95}, {0xb99, 0xb9a},
    {0xb9c, 0xb9c}, {0xb9e, 0xb9f}, {0xba3, 0xba4}, {0xba8, 0xbaa}, {0xbae, 0xbb9}, {0xbd0, 0xbd0},
    {0xc05, 0xc0c}, {0xc0e, 0xc10}, {0xc12, 0xc28}, {0xc2a, 0xc39}, {0xc3d, 0xc3d}, {0xc58, 0xc5a},
    {0xc5c, 0xc5d}, {0xc60, 0xc61}, {0xc80, 0xc80}, {0xc85, 0xc8c}, {0xc8e, 0xc90}, {0xc92, 0xca8},
    {0xcaa, 0xcb3}, {0xcb5, 0xcb9}, {0xcbd, 0xcbd}, {0xcdc, 0xcde}, {0xce0, 0xce1}, {0xcf1, 0xcf2},
    {0xd04, 0xd0c}, {0xd0e, 0xd10}, {0xd12, 0xd3a}, {0xd3d, 0xd3d}, {0xd4e, 0xd4e}, {0xd54, 0xd56},
    {0xd5f, 0xd61}, {0xd7a, 0xd7f}, {0xd85, 0xd96}, {0xd9a, 0xdb1}, {0xdb3, 0xdbb}, {0xdbd, 0xdbd},
    {0xdc0, 0xdc6}, {0xe01, 0xe30}, {0xe32, 0xe33}, {0xe40, 0xe46}, {0xe81, 0xe82}, {0xe84, 0xe84},
    {0xe86, 0xe8a}, {0xe8c, 0xea3}, {0xea5, 0xea5}, {0xea7, 0xeb0}, {0xeb2, 0xeb3}, {0xebd, 0xebd},
    {0xec0, 0xec4}, {0xec6, 0xec6}, {0xedc, 0xedf}, {0xf00, 0xf00}, {0xf40, 0xf47}, {0xf49, 0xf6c},
    {0xf88, 0xf8c}, {0x1000, 0x102a}, {0x103f, 0x103f}, {0x1050, 0x1055}, {0x105a, 0x105d},
    {0x1061, 0x1061}, {0x1065, 0x1066}, {0x106e, 0x1070}, {0x1075, 0x1081}, {0x108e, 0x108e},
    {0x10a0, 0x10c5}, {0x10c7, 0x10c7}, {0x10cd, 0x10cd}, {0x10d0, 0x10fa}, {0x10fc, 0x1248},
    {0x124a, 0x124d}, {0x1250, 0x1256}, {0x1258, 0x1258}, {0x125a, 0x125d}, {0x1260, 0x1288},
    {0x128a, 0x128d}, {0x1290, 0x12b0}, {0x12b2, 0x12b5}, {0x12b8, 0x12be}, {0x12c0, 0x12c0},
    {0x12c2, 0x12c5}, {0x12c8, 0x12d6}, {0x12d8, 0x1310}, {0x1312, 0x1315}, {0x1318, 0x135a},
    {0x1380, 0x138f}, {0x13a0, 0x13f5}, {0x13f8, 0x13fd}, {0x1401, 0x166c}, {0x166f, 0x167f},
    {0x1681, 0x169a}, {0x16a0, 0x16ea}, {0x16f1, 0x16f8}, {0x1700, 0x1711}, {0x171f, 0x1731},
    {0x1740, 0x1751}, {0x1760, 0x176c}, {0x176e, 0x1770}, {0x1780, 0x17b3}, {0x17d7, 0x17d7},
    {0x17dc, 0x17dc}, {0x1820, 0x1878}, {0x1880, 0x1884}, {0x1887, 0x18a8}, {0x18aa, 0x18aa},
    {0x18b0, 0x18f5}, {0x1900, 0x191e}, {0x1950, 0x196d}, {0x1970, 0x1974}, {0x1980, 0x19ab},
    {0x19b0, 0x19c9}, {0x1a00, 0x1a16}, {0x1a20, 0x1a54}, {0x1aa7, 0x1aa7}, {0x1b05, 0x1b33},
    {0x1b45, 0x1b4c}, {0x1b83, 0x1ba0}, {0x1bae, 0x1baf}, {0x1bba, 0x1be5}, {0x1c00, 0x1c23},
    {0x1c4d, 0x1c4f}, {0x1c5a, 0x1c7d}, {0x1c80, 0x1c8a}, {0x1c90, 0x1cba}, {0x1cbd, 0x1cbf},
    {0x1ce9, 0x1cec}, {0x1cee, 0x1cf3}, {0x1cf5, 0x1cf6}, {0x1cfa, 0x1cfa}, {0x1d00, 0x1dbf},
    {0x1e00, 0x1f15}, {0x1f18, 0x1f1d}, {0x1f20, 0x1f45}, {0x1f48, 0x1f4d}, {0x1f50, 0x1f57},
    {0x1f59, 0x1f59}, {0x1f5b, 0x1f5b}, {0x1f5d, 0x1f5d}, {0x1f5f, 0x1f7d}, {0x1f80, 0x1fb4},
    {0x1fb6, 0x1fbc}, {0x1fbe, 0x1fbe}, {0x1fc2, 0x1fc4}, {0x1fc6, 0x1fcc}, {0x1fd0, 0x1fd3},
    {0x1fd6, 0x1fdb}, {0x1fe0, 0x1fec}, {0x1ff2, 0x1ff4}, {0x1ff6, 0x1ffc}, {0x2071, 0x2071},
    {0x207f, 0x207f}, {0x2090, 0x209c}, {0x2102, 0x2102}, {0x2107, 0x2107}, {0x210a, 0x2113},
    {0x2115, 0x2115}, {0x2119, 0x211d}, {0x2124, 0x2124}, {0x2126, 0x2126}, {0x2128, 0x2128},
    {0x212a, 0x212d}, {0x212f, 0x2139}, {0x213c, 0x213f}, {0x2145, 0x2149}, {0x214e, 0x214e},
    {0x2183, 0x2184}, {0x2c00, 0x2ce4}, {0x2ceb, 0x2cee}, {0x2cf2, 0x2cf3}, {0x2d00, 0x2d25},
    {0x2d27, 0x2d27}, {0x2d2d, 0x2d2d}, {0x2d30, 0x2d67}, {0x2d6f, 0x2d6f}, {0x2d80, 0x2d96},
    {0x2da0, 0x2da6}, {0x2da8, 0x2dae}, {0x2db0, 0x2db6}, {0x2db8, 0x2dbe}, {0x2dc0, 0x2dc6},
    {0x2dc8, 0x2dce}, {0x2dd0, 0x2dd6}, {0x2dd8, 0x2dde}, {0x2e2f, 0x2e2f}, {0x3005, 0x3006},
    {0x3031, 0x3035}, {0x303b, 0x303c}, {0x3041, 0x3096}, {0x309d, 0x309f}, {0x30a1, 0x30fa},
    {0x30fc, 0x30ff}, {0x3105, 0x312f}, {0x3131, 0x318e}, {0x31a0, 0x31bf}, {0x31f0, 0x31ff},
    {0x3400, 0x4dbf}, {0x4e00, 0xa48c}, {0xa4d0, 0xa4fd}, {0xa500, 0xa60c}, {0xa610, 0xa61f},
    {0xa62a, 0xa62b}, {0xa640, 0xa66e}, {0xa67f, 0xa69d}, {0xa6a0, 0xa6e5}, {0xa717, 0xa71f},
    {0xa722, 0xa788}, {0xa78b, 0xa7dc}, {0xa7f1, 0xa801}, {0xa803, 0xa805}, {0xa807, 0xa80a},
    {0xa80c, 0xa822}, {0xa840, 0xa873}, {0xa882, 0xa8b3}, {0xa8f2, 0xa8f7}, {0xa8fb, 0xa8fb},
    {0xa8fd, 0xa8fe}, {0xa90a, 0xa925}, {0xa930, 0xa946}, {0xa960, 0xa97c}, {0xa984, 0xa9b2},
    {0xa9cf, 0xa9cf}, {0xa9e0, 0xa9e4}, {0xa9e6, 0xa9ef}, {0xa9fa, 0xa9fe}, {0xaa00, 0xaa28},
    {0xaa40, 0xaa42}, {0xaa44, 0xaa4b}, {0xaa60, 0xaa76}, {0xaa7a, 0xaa7a}, {0xaa7e, 0xaaaf},
    {0xaab1, 0xaab1}, {0xaab5, 0xaab6}, {0xaab9, 0xaabd}, {0xaac0, 0xaac0}, {0xaac2, 0xaac2},
    {0xaadb, 0xaadd}, {0xaae0, 0xaaea}, {0xaaf2, 0xaaf4}, {0xab01, 0xab06}, {0xab09, 0xab0e},
    {0xab11, 0xab16}, {0xab20, 0xab26}, {0xab28, 0xab2e}, {0xab30, 0xab5a}, {0xab5c, 0xab69},
    {0xab70, 0xabe2}, {0xac00, 0xd7a3}, {0xd7b0, 0xd7c6}, {0xd7cb, 0xd7fb}, {0xf900, 0xfa6d},
    {0xfa70, 0xfad9}, {0xfb00, 0xfb06}, {0xfb13, 0xfb17}, {0xfb1d, 0xfb1d}, {0xfb1f, 0xfb28},
    {0xfb2a, 0xfb36}, {0xfb38, 0xfb3c}, {0xfb3e, 0xfb3e}, {0xfb40, 0xfb41}, {0xfb43, 0xfb44},
    {0xfb46, 0xfbb1}, {0xfbd3, 0xfd3d}, {0xfd50, 0xfd8f}, {0xfd92, 0xfdc7}, {0xfdf0, 0xfdfb},
    {0xfe70, 0xfe74}, {0xfe76, 0xfefc}, {0xff21, 0xff3a}, {0xff41, 0xff5a}, {0xff66, 0xffbe},
    {0xffc2, 0xffc7}, {0xffca, 0xffcf}, {0xffd2, 0xffd7}, {0xffda, 0xffdc}, {0x10000, 0x1000b},
    {0x1000d, 0x10026}, {0x10028, 0x1003a}, {0x1003c, 0x1003d}, {0x1003f, 0x1004d},
    {0x10050, 0x1005d}, {0x10080, 0x100fa}, {0x10280, 0x1029c}, {0x102a0, 0x102d0},
    {0x10300, 0x1031f}, {0x1032d, 0x10340}, {0x10342, 0x10349}, {0x10350, 0x10375},
    {0x10380, 0x1039d}, {0x103a0, 0x103c3}, {0x103c8, 0x103cf}, {0x10400, 0x1049d},
    {0x104b0, 0x104d3}, {0x104d8, 0x104fb}, {0x10500, 0x10527}, {0x10530, 0x10563},
    {0x10570, 0x1057a}, {0x1057c, 0x1058a}, {0x1058c, 0x10592}, {0x10594, 0x10595},
    {0x10597, 0x105a1}, {0x105a3, 0x105b1}, {0x105b3, 0x105b9}, {0x105bb, 0x105bc},
    {0x105c0, 0x105f3}, {0x10600, 0x10736}, {0x10740, 0x10755}, {0x10760, 0x10767},
    {0x10780, 0x10785}, {0x10787, 0x107b0}, {0x107b2, 0x107ba}, {0x10800, 0x10805},
    {0x10808, 0x10808}, {0x1080a, 0x10835}, {0x10837, 0x10838}, {0x1083c, 0x1083c},
    {0x1083f, 0x10855}, {0x10860, 0x10876}, {0x10880, 0x1089e}, {0x108e0, 0x108f2},
    {0x108f4, 0x108f5}, {0x10900, 0x10915}, {0x10920, 0x10939}, {0x10940, 0x10959},
    {0x10980, 0x109b7}, {0x109be, 0x109bf}, {0x10a00, 0x10a00}, {0x10a10, 0x10a13},
    {0x10a15, 0x10a17}, {0x10a19, 0x10a35}, {0x10a60, 0x10a7c}, {0x10a80, 0x10a9c},
    {0x10ac0, 0x10ac7}, {0x10ac9, 0x10ae4}, {0x10b00, 0x10b35}, {0x10b40, 0x10b55},
    {0x10b60, 0x10b72}, {0x10b80, 0x10b91}, {0x10c00, 0x10c48}, {0x10c80, 0x10cb2},
    {0x10cc0, 0x10cf2}, {0x10d00, 0x10d23}, {0x10d4a, 0x10d65}, {0x10d6f, 0x10d85},
    {0x10e80, 0x10ea9}, {0x10eb0, 0x10eb1}, {0x10ec2, 0x10ec7}, {0x10f00, 0x10f1c},
    {0x10f27, 0x10f27}, {0x10f30, 0x10f45}, {0x10f70, 0x10f81}, {0x10fb0, 0x10fc4},
    {0x10fe0, 0x10ff6}, {0x11003, 0x11037}, {0x11071, 0x11072}, {0x11075, 0x11075},
    {0x11083, 0x110af}, {0x110d0, 0x110e8}, {0x11103, 0x11126}, {0x11144, 0x11144},
    {0x11147, 0x11147}, {0x11150, 0x11172}, {0x11176, 0x11176}, {0x11183, 0x111b2},
    {0x111c1, 0x111c4}, {0x111da, 0x111da}, {0x111dc, 0x111dc}, {0x11200, 0x11211},
    {0x11213, 0x1122b}, {0x1123f, 0x11240}, {0x11280, 0x11286}, {0x11288, 0x11288},
    {0x1128a, 0x1128d}, {0x1128f, 0x1129d}, {0x1129f, 0x112a8}, {0x112b0, 0x112de},
    {0x11305, 0x1130c}, {0x1130f, 0x11310}, {0x11313, 0x11328}, {0x1132a, 0x11330},
    {0x11332, 0x11333}, {0x11335, 0x11339}, {0x1133d, 0x1133d}, {0x11350, 0x11350},
    {0x1135d, 0x11361}, {0x11380, 0x11389}, {0x1138b, 0x1138b}, {0x1138e, 0x1138e},
    {0x11390, 0x113b5}, {0x113b7, 0x113b7}, {0x113d1, 0x113d1}, {0x113d3, 0x113d3},
    {0x11400, 0x11434}, {0x11447, 0x1144a}, {0x1145f, 0x11461}, {0x11480, 0x114af},
    {0x114c4, 0x114c5}, {0x114c7, 0x114c7}, {0x11580, 0x115ae}, {0x115d8, 0x115db},
    {0x11600, 0x1162f}, {0x11644, 0x11644}, {0x11680, 0x116aa}, {0x116b8, 0x116b8},
    {0x11700, 0x1171a}, {0x11740, 0x11746}, {0x11800, 0x1182b}, {0x118a0, 0x118df},
    {0x118ff, 0x11906}, {0x11909, 0x11909}, {0x1190c, 0x11913}, {0x11915, 0x11916},
    {0x11918, 0x1192f}, {0x1193f, 0x1193f}, {0x11941, 0x11941}, {0x119a0, 0x119a7},
    {0x119aa, 0x119d0}, {0x119e1, 0x119e1}, {0x119e3, 0x119e3}, {0x11a00, 0x11a00},
    {0x11a0b, 0x11a32}, {0x11a3a, 0x11a3a}, {0x11a50, 0x11a50}, {0x11a5c, 0x11a89},
    {0x11a9d, 0x11a9d}, {0x11ab0, 0x11af8}, {0x11bc0, 0x11be0}, {0x11c00, 0x11c08},
    {0x11c0a, 0x11c2e}, {0x11c40, 0x11c40}, {0x11c72, 0x11c8f}, {0x11d00, 0x11d06},
    {0x11d08, 0x11d09}, {0x11d0b, 0x11d30}, {0x11d46, 0x11d46}, {0x11d60, 0x11d65},
    {0x11d67, 0x11d68}, {0x11d6a, 0x11d89}, {0x11d98, 0x11d98}, {0x11db0, 0x11ddb},
    {0x11ee0, 0x11ef2}, {0x11f02, 0x11f02}, {0x11f04, 0x11f10}, {0x11f12, 0x11f33},
    {0x11fb0, 0x11fb0}, {0x12000, 0x12399}, {0x12480, 0x12543}, {0x12f90, 0x12ff0},
    {0x13000, 0x1342f}, {0x13441, 0x13446}, {0x13460, 0x143fa}, {0x14400, 0x14646},
    {0x16100, 0x1611d}, {0x16800, 0x16a38}, {0x16a40, 0x16a5e}, {0x16a70, 0x16abe},
    {0x16ad0, 0x16aed}, {0x16b00, 0x16b2f}, {0x16b40, 0x16b43}, {0x16b63, 0x16b77},
    {0x16b7d, 0x16b8f}, {0x16d40, 0x16d6c}, {0x16e40, 0x16e7f}, {0x16ea0, 0x16eb8},
    {0x16ebb, 0x16ed3}, {0x16f00, 0x16f4a}, {0x16f50, 0x16f50}, {0x16f93, 0x16f9f},
    {0x16fe0, 0x16fe1}, {0x16fe3, 0x16fe3}, {0x16ff2, 0x16ff3}, {0x17000, 0x18cd5},
    {0x18cff, 0x18d1e}, {0x18d80, 0x18df2}, {0x1aff0, 0x1aff3}, {0x1aff5, 0x1affb},
    {0x1affd, 0x1affe}, {0x1b000, 0x1b122}, {0x1b132, 0x1b132}, {0x1b150, 0x1b152},
    {0x1b155, 0x1b155}, {0x1b164, 0x1b167}, {0x1b170, 0x1b2fb}, {0x1bc00, 0x1bc6a},
    {0x1bc70, 0x1bc7c}, {0x1bc80, 0x1bc88}, {0x1bc90, 0x1bc99}, {0x1d400, 0x1d454},
    {0x1d456, 0x1d49c}, {0x1d49e, 0x1d49f}, {0x1d4a2, 0x1d4a2}, {0x1d4a5, 0x1d4a6},
    {0x1d4a9, 0x1d4ac}, {0x1d4ae, 0x1d4b9}, {0x1d4bb, 0x1d4bb}, {0x1d4bd, 0x1d4c3},
    {0x1d4c5, 0x1d505}, {0x1d507, 0x1d50a}, {0x1d50d, 0x1d514}, {0x1d516, 0x1d51c},
    {0x1d51e, 0x1d539}, {0x1d53b, 0x1d53e}, {0x1d540, 0x1d544}, {0x1d546, 0x1d546},
    {0x1d54a, 0x1d550}, {0x1d552, 0x1d6a5}, {0x1d6a8, 0x1d6c0}, {0x1d6c2, 0x1d6da},
    {0x1d6dc, 0x1d6fa}, {0x1d6fc, 0x1d714}, {0x1d716, 0x1d734}, {0x1d736, 0x1d74e},
    {0x1d750, 0x1d76e}, {0x1d770, 0x1d788}, {0x1d78a, 0x1d7a8}, {0x1d7aa, 0x1d7c2},
    {0x1d7c4, 0x1d7cb}, {0x1df00, 0x1df1e}, {0x1df25, 0x1df2a}, {0x1e030, 0x1e06d},
    {0x1e100, 0x1e12c}, {0x1e137, 0x1e13d}, {0x1e14e, 0x1e14e}, {0x1e290, 0x1e2ad},
    {0x1e2c0, 0x1e2eb}, {0x1e4d0, 0x1e4eb}, {0x1e5d0, 0x1e5ed}, {0x1e5f0, 0x1e5f0},
    {0x1e6c0, 0x1e6de}, {0x1e6e0, 0x1e6e2}, {0x1e6e4, 0x1e6e5}, {0x1e6e7, 0x1e6ed},
    {0x1e6f0, 0x1e6f4}, {0x1e6fe, 0x1e6ff}, {0x1e7e0, 0x1e7e6}, {0x1e7e8, 0x1e7eb},
    {0x1e7ed, 0x1e7ee}, {0x1e7f0, 0x1e7fe}, {0x1e800, 0x1e8c4}, {0x1e900, 0x1e943},
    {0x1e94b, 0x1e94b}, {0x1ee00, 0x1ee03}, {0x1ee05, 0x1ee1f}, {0x1ee21, 0x1ee22},
    {0x1ee24, 0x1ee24}, {0x1ee27, 0x1ee27}, {0x1ee29, 0x1ee32}, {0x1ee34, 0x1ee37},
    {0x1ee39, 0x1ee39}, {0x1ee3b, 0x1ee3b}, {0x1ee42, 0x1ee42}, {0x1ee47, 0x1ee47},
    {0x1ee49, 0x1ee49}, {0x1ee4b, 0x1ee4b}, {0x1ee4d, 0x1ee4f}, {0x1ee51, 0x1ee52},
    {0x1ee54, 0x1ee54}, {0x1ee57, 0x1ee57}, {0x1ee59, 0x1ee59}, {0x1ee5b, 0x1ee5b},
    {0x1ee5d, 0x1ee5d}, {0x1ee5f, 0x1ee5f}, {0x1ee61, 0x1ee62}, {0x1ee64, 0x1ee64},
    {0x1ee67, 0x1ee6a}, {0x1ee6c, 0x1ee72}, {0x1ee74, 0x1ee77}, {0x1ee79, 0x1ee7c},
    {0x1ee7e, 0x1ee7e}, {0x1ee80, 0x1ee89}, {0x1ee8b, 0x1ee9b}, {0x1eea1, 0x1eea3},
    {0x1eea5, 0x1eea9}, {0x1eeab, 0x1eebb}, {0x20000, 0x2a6df}, {0x2a700, 0x2b81d},
    {0x2b820, 0x2cead}, {0x2ceb0, 0x2ebe0}, {0x2ebf0, 0x2ee5d}, {0x2f800, 0x2fa1d},
    {0x30000, 0x3134a}, {0x31350, 0x33479},
};
static const uint32_t number_ranges[][2] = {
    {0xb2, 0xb3}, {0xb9, 0xb9}, {0xbc, 0xbe}, {0x660, 0x669}, {0x6f0, 0x6f9}, {0x7c0, 0x7c9},
    {0x966, 0x96f}, {0x9e6, 0x9ef}, {0x9f4, 0x9f9}, {0xa66, 0xa6f}, {0xae6, 0xaef}, {0xb66, 0xb6f},
    {0xb72, 0xb77}, {0xbe6, 0xbf2}, {0xc66, 0xc6f}, {0xc78, 0xc7e}, {0xce6, 0xcef}, {0xd58, 0xd5e},
    {0xd66, 0xd78}, {0xde6, 0xdef}, {0xe50, 0xe59}, {0xed0, 0xed9}, {0xf20, 0xf33},
    {0x1040, 0x1049}, {0x1090, 0x1099}, {0x1369, 0x137c}, {0x16ee, 0x16f0}, {0x17e0, 0x17e9},
    {0x17f0, 0x17f9}, {0x1810, 0x1819}, {0x1946, 0x194f}, {0x19d0, 0x19da}, {0x1a80, 0x1a89},
    {0x1a90, 0x1a99}, {0x1b50, 0x1b59}, {0x1bb0, 0x1bb9}, {0x1c40, 0x1c49}, {0x1c50, 0x1c59},
    {0x2070, 0x2070}, {0x2074, 0x2079}, {0x2080, 0x2089}, {0x2150, 0x2182}, {0x2185, 0x2189},
    {0x2460, 0x249b}, {0x24ea, 0x24ff}, {0x2776, 0x2793}, {0x2cfd, 0x2cfd}, {0x3007, 0x3007},
    {0x3021, 0x3029}, {0x3038, 0x303a}, {0x3192, 0x3195}, {0x3220, 0x3229}, {0x3248, 0x324f},
    {0x3251, 0x325f}, {0x3280, 0x3289}, {0x32b1, 0x32bf}, {0xa620, 0xa629}, {0xa6e6, 0xa6ef},
    {0xa830, 0xa835}, {0xa8d0, 0xa8d9}, {0xa900, 0xa909}, {0xa9d0, 0xa9d9}, {0xa9f0, 0xa9f9},
    {0xaa50, 0xaa59}, {0xabf0, 0xabf9}, {0xff10, 0xff19}, {0x10107, 0x10133}, {0x10140, 0x10178},
    {0x1018a, 0x1018b}, {0x102e1, 0x102fb}, {0x10320, 0x10323}, {0x10341, 0x10341},
    {0x1034a, 0x1034a}, {0x103d1, 0x103d5}, {0x104a0, 0x104a9}, {0x10858, 0x1085f},
    {0x10879, 0x1087f}, {0x108a7, 0x108af}, {0x108fb, 0x108ff}, {0x10916, 0x1091b},
    {0x109bc, 0x109bd}, {0x109c0, 0x109cf}, {0x109d2, 0x109ff}, {0x10a40, 0x10a48},
    {0x10a7d, 0x10a7e}, {0x10a9d, 0x10a9f}, {0x10aeb, 0x10aef}, {0x10b58, 0x10b5f},
    {0x10b78, 0x10b7f}, {0x10ba9, 0x10baf}, {0x10cfa, 0x10cff}, {0x10d30, 0x10d39},
    {0x10d40, 0x10d49}, {0x10e60, 0x10e7e}, {0x10f1d, 0x10f26}, {0x10f51, 0x10f54},
    {0x10fc5, 0x10fcb}, {0x11052, 0x1106f}, {0x110f0, 0x110f9}, {0x11136, 0x1113f},
    {0x111d0, 0x111d9}, {0x111e1, 0x111f4}, {0x112f0, 0x112f9}, {0x11450, 0x11459},
    {0x114d0, 0x114d9}, {0x11650, 0x11659}, {0x116c0, 0x116c9}, {0x116d0, 0x116e3},
    {0x11730, 0x1173b}, {0x118e0, 0x118f2}, {0x11950, 0x11959}, {0x11bf0, 0x11bf9},
    {0x11c50, 0x11c6c}, {0x11d50, 0x11d59}, {0x11da0, 0x11da9}, {0x11de0, 0x11de9},
    {0x11f50, 0x11f59}, {0x11fc0, 0x11fd4}, {0x12400, 0x1246e}, {0x16130, 0x16139},
    {0x16a60, 0x16a69}, {0x16ac0, 0x16ac9}, {0x16b50, 0x16b59}, {0x16b5b, 0x16b61},
    {0x16d70, 0x16d79}, {0x16e80, 0x16e96}, {0x16ff4, 0x16ff6}, {0x1ccf0, 0x1ccf9},
    {0x1d2c0, 0x1d2d3}, {0x1d2e0, 0x1d2f3}, {0x1d360, 0x1d378}, {0x1d7ce, 0x1d7ff},
    {0x1e140, 0x1e149}, {0x1e2f0, 0x1e2f9}, {0x1e4f0, 0x1e4f9}, {0x1e5f1, 0x1e5fa},
    {0x1e8c7, 0x1e8cf}, {0x1e950, 0x1e959}, {0x1ec71, 0x1ecab}, {0x1ecad, 0x1ecaf},
    {0x1ecb1, 0x1ecb4}, {0x1ed01, 0x1ed2d}, {0x1ed2f, 0x1ed3d}, {0x1f100, 0x1f10c},
    {0x1fbf0, 0x1fbf9},
};
// clang-format on

enum { C_OTHER, C_LETTER, C_NUMBER, C_SPACE };
#define INVALID_CP 0xFFFFFFFFu

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t c) {
    size_t lo = 0, hi = n; // find the first range with r[i][1] >= c
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (r[mid][1] < c)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && r[lo][0] <= c;
}

static int cp_class(uint32_t c) {
    if (c < 0x80) {
        if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return C_LETTER;
        if (c >= '0' && c <= '9') return C_NUMBER;
        if (c == ' ' || (c >= '\t' && c <= '\r')) return C_SPACE;
        return C_OTHER;
    }
    if (c == INVALID_CP) return C_OTHER;
    if (c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
        c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF)
        return C_SPACE;
    if (in_ranges(letter_ranges, sizeof letter_ranges / sizeof *letter_ranges, c)) return C_LETTER;
    if (in_ranges(number_ranges, sizeof number_ranges / sizeof *number_ranges, c)) return C_NUMBER;
    return C_OTHER;
}

// Decodes the UTF-8 code point at s[0, n), n >= 1: returns its length in bytes and stores it
// in *cp. An invalid, overlong, surrogate or truncated sequence counts as a single byte with
// *cp = INVALID_CP (the pre-tokenizer treats it as punctuation, so any bytes round-trip).
static size_t utf8_next(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t b = s[0];
    *cp = INVALID_CP;
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    size_t len;
    uint32_t c, lo = 0x80, hi = 0xBF; // allowed range of the second byte
    if (b >= 0xC2 && b <= 0xDF)
        len = 2, c = b & 0x1F;
    else if (b >= 0xE0 && b <= 0xEF) {
        len = 3, c = b & 0x0F;
        if (b == 0xE0)
            lo = 0xA0; // overlong
        else if (b == 0xED)
            hi = 0x9F; // surrogates
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4, c = b & 0x07;
        if (b == 0xF0)
            lo = 0x90; // overlong
        else if (b == 0xF4)
            hi = 0x8F; // > U+10FFFF
    } else
        return 1;
    if (n < len || s[1] < lo || s[1] > hi) return 1;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 1;
        c = (c << 6) | (s[i] & 0x3F);
    }
    *cp = c;
    return len;
}

static int class_at(const uint8_t *s, size_t n, size_t i, size_t *adv) {
    if (s[i] < 0x80) { // fast path
        *adv = 1;
        return cp_class(s[i]);
    }
    uint32_t c;
    *adv = utf8_next(s + i, n - i, &c);
    return cp_class(c);
}

// End of the pre-token (word) that starts at s[i], i < n: the regex above, by hand.
static size_t pretoken_end(const uint8_t *s, size_t n, size_t i) {
    // 's 't 're 've 'm 'll 'd (case-sensitive, as in GPT-2)
    if (s[i] == '\'' && i + 1 < n) {
        uint8_t c = s[i + 1];
        if (c == 's' || c == 't' || c == 'm' || c == 'd') return i + 2;
        if (i + 2 < n && ((c == 'r' && s[i + 2] == 'e') || (c == 'v' && s[i + 2] == 'e') ||
                          (c == 'l' && s[i + 2] == 'l')))
            return i + 3;
    }
    size_t adv, j = i;
    int cls = class_at(s, n, i, &adv);
    // " ?X+" for X in letters, numbers, other: an optional leading ' ' then a run of one class
    if (s[i] == ' ' && i + 1 < n) {
        int next = class_at(s, n, i + 1, &adv);
        if (next != C_SPACE) cls = next, j = i + 1;
    }
    if (cls != C_SPACE) {
        while (j < n && class_at(s, n, j, &adv) == cls)
            j += adv;
        return j;
    }
    // whitespace: "\s+(?!\S)" keeps the run but, when a non-space follows, gives its last
    // character to the next word (" word" then matches " ?\p{L}+"); "\s+" takes a single
    // whitespace character before a non-space
    size_t last = i; // start of the last whitespace character of the run
    while (j < n && class_at(s, n, j, &adv) == C_SPACE)
        last = j, j += adv;
    if (j == n) return n;
    return last > i ? last : j;
}

// ---------------------------------------------------------------------------------------------
// Hash tables (open addressing, power-of-two sizes).

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull; // FNV-1a
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n)
        c *= 2;
    return c;
}

typedef struct {
    uint64_t key; // (left id << 32) | right id
    int32_t rank; // -1: empty slot
    int32_t merged;
} MergeSlot;

typedef struct { // a cached word: its bytes and its token ids, stored in the cache arenas
    uint64_t hash;
    uint32_t key_off, key_len; // key_len 0: empty slot
    uint32_t ids_off, ids_len;
} CacheSlot;

#define CACHE_MAX_WORD 256          // longer words are not cached
#define CACHE_MAX_WORDS (1u << 20)  // the cache is cleared when it holds this many words
#define CACHE_MAX_BYTES (64u << 20) // or when its arenas grow past this
#define BPE_MAX_WORD (1u << 20)     // longer words are merged in pieces (bounds memory)

// A queued merge of sym[left] and its right neighbour. Ranks identify pairs, so the entry is
// still current iff the pair there now has this rank.
typedef struct {
    int32_t rank, left;
} Cand;

typedef struct {
    int id, prev, next; // id -1: merged into its left neighbour
} Sym;

typedef struct {
    int vocab;
    uint8_t *bytes; // token i is bytes[off[i] .. off[i+1])
    uint32_t *off;
    int byte_tok[256]; // the single-byte tokens
    MergeSlot *merges;
    size_t merge_mask;
    CacheSlot *cache;
    size_t cache_mask, cache_used;
    uint8_t *ckeys; // cache arenas
    size_t ckeys_n, ckeys_cap;
    int *cids;
    size_t cids_n, cids_cap;
    Sym *sym; // scratch for the merge loop
    Cand *heap, *batch;
    size_t sym_cap, heap_cap;
    char *vocab_text, *merges_text; // the files as read, written back by save
    size_t vocab_len, merges_len;
} Bpe;

static uint64_t merge_key(int a, int b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }
static size_t merge_index(uint64_t key, size_t mask) {
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

static const MergeSlot *merge_find(const Bpe *b, int left, int right) {
    uint64_t key = merge_key(left, right);
    for (size_t i = merge_index(key, b->merge_mask);; i = (i + 1) & b->merge_mask) {
        const MergeSlot *s = &b->merges[i];
        if (s->rank < 0) return NULL;
        if (s->key == key) return s;
    }
}

// ---------------------------------------------------------------------------------------------
// The merge loop for one word.

static void heap_push(Bpe *b, size_t *n, Cand c) {
    Cand *h = b->heap;
    size_t i = (*n)++;
    while (i) {
        size_t p = (i - 1) / 2;
        if (h[p].rank < c.rank || (h[p].rank == c.rank && h[p].left < c.left)) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static Cand heap_pop(Bpe *b, size_t *n) {
    Cand *h = b->heap, top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t k = 2 * i + 1;
        if (k >= *n) break;
        if (k + 1 < *n && (h[k + 1].rank < h[k].rank ||
                           (h[k + 1].rank == h[k].rank && h[k + 1].left < h[k].left)))
            k++;
        if (last.rank < h[k].rank || (last.rank == h[k].rank && last.left < h[k].left)) break;
        h[i] = h[k];
        i = k;
    }
    h[i] = last;
    return top;
}

// Queues the pair (sym[left], its right neighbour) if the merge table has it.
static void push_pair(Bpe *b, size_t *n, int left) {
    Sym *s = b->sym;
    int right = s[left].next;
    const MergeSlot *m = merge_find(b, s[left].id, s[right].id);
    if (m) heap_push(b, n, (Cand){m->rank, left});
}

// Runs BPE on w[0, n), 2 <= n <= BPE_MAX_WORD; the result is the list b->sym[0],
// b->sym[0].next, ...
static void bpe_merge_word(Bpe *b, const uint8_t *w, size_t n) {
    if (n > b->sym_cap) {
        free(b->sym);
        free(b->heap);
        free(b->batch);
        b->sym_cap = n > 2 * b->sym_cap ? n : 2 * b->sym_cap;
        b->heap_cap = 3 * b->sym_cap; // n-1 initial pairs + at most 2 per merge
        b->sym = xmalloc(b->sym_cap * sizeof(Sym));
        b->heap = xmalloc(b->heap_cap * sizeof(Cand));
        b->batch = xmalloc(b->heap_cap * sizeof(Cand));
    }
    Sym *s = b->sym;
    for (size_t i = 0; i < n; i++)
        s[i] = (Sym){b->byte_tok[w[i]], (int)i - 1, (int)i + 1};
    s[n - 1].next = -1;
    size_t nh = 0;
    for (size_t i = 0; i + 1 < n; i++)
        push_pair(b, &nh, (int)i);
    while (nh) {
        // All current occurrences of the best pair are merged left to right before any pair
        // they create is considered (as GPT-2 does); pairs created here never have this rank.
        int32_t rank = b->heap[0].rank;
        size_t nb = 0;
        while (nh && b->heap[0].rank == rank)
            b->batch[nb++] = heap_pop(b, &nh);
        for (size_t k = 0; k < nb; k++) {
            int l = b->batch[k].left, r = s[l].next;
            if (s[l].id < 0 || r < 0) continue; // stale: merged away meanwhile
            const MergeSlot *m = merge_find(b, s[l].id, s[r].id);
            if (!m || m->rank != rank) continue; // stale: a neighbour changed
            s[l].id = m->merged;
            s[l].next = s[r].next;
            if (s[r].next >= 0) s[s[r].next].prev = l;
            s[r].id = -1;
            if (s[l].prev >= 0) push_pair(b, &nh, s[l].prev);
            if (s[l].next >= 0) push_pair(b, &nh, l);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The word cache.

static void cache_clear(Bpe *b) {
    memset(b->cache, 0, (b->cache_mask + 1) * sizeof(CacheSlot));
    b->cache_used = b->ckeys_n = b->cids_n = 0;
}

static const CacheSlot *cache_find(const Bpe *b, const uint8_t *w, size_t n, uint64_t h) {
    for (size_t i = h & b->cache_mask;; i = (i + 1) & b->cache_mask) {
        const CacheSlot *c = &b->cache[i];
        if (!c->key_len) return NULL;
        if (c->hash == h && c->key_len == n && !memcmp(b->ckeys + c->key_off, w, n)) return c;
    }
}

static void cache_put_slot(Bpe *b, CacheSlot c) {
    size_t i = c.hash & b->cache_mask;
    while (b->cache[i].key_len)
        i = (i + 1) & b->cache_mask;
    b->cache[i] = c;
}

static void cache_insert(Bpe *b, const uint8_t *w, size_t n, uint64_t h, const int *ids,
                         size_t nids) {
    if (b->cache_used >= CACHE_MAX_WORDS || b->ckeys_n + n > CACHE_MAX_BYTES ||
        (b->cids_n + nids) * sizeof(int) > CACHE_MAX_BYTES)
        cache_clear(b);
    if (2 * (b->cache_used + 1) > b->cache_mask + 1) { // grow to keep the load under 1/2
        size_t old_n = b->cache_mask + 1;
        CacheSlot *old = b->cache;
        b->cache_mask = 2 * old_n - 1;
        b->cache = xcalloc(2 * old_n, sizeof(CacheSlot));
        for (size_t i = 0; i < old_n; i++)
            if (old[i].key_len) cache_put_slot(b, old[i]);
        free(old);
    }
    if (b->ckeys_n + n > b->ckeys_cap) {
        b->ckeys_cap = 2 * (b->ckeys_n + n);
        b->ckeys = realloc(b->ckeys, b->ckeys_cap);
        if (!b->ckeys) die(EXIT_IO, "out of memory growing the BPE cache");
    }
    if (b->cids_n + nids > b->cids_cap) {
        b->cids_cap = 2 * (b->cids_n + nids);
        b->cids = realloc(b->cids, b->cids_cap * sizeof(int));
        if (!b->cids) die(EXIT_IO, "out of memory growing the BPE cache");
    }
    memcpy(b->ckeys + b->ckeys_n, w, n);
    memcpy(b->cids + b->cids_n, ids, nids * sizeof(int));
    cache_put_slot(
        b, (CacheSlot){h, (uint32_t)b->ckeys_n, (uint32_t)n, (uint32_t)b->cids_n, (uint32_t)nids});
    b->ckeys_n += n;
    b->cids_n += nids;
    b->cache_used++;
}

// ---------------------------------------------------------------------------------------------
// Encode, decode, save, free.

static void encode_word(Bpe *b, const uint8_t *w, size_t n, TokenList *out) {
    while (n > BPE_MAX_WORD) { // only in pathological input, e.g. a megabyte of letters
        encode_word(b, w, BPE_MAX_WORD, out);
        w += BPE_MAX_WORD;
        n -= BPE_MAX_WORD;
    }
    if (n == 1) {
        token_list_push(out, b->byte_tok[w[0]]);
        return;
    }
    uint64_t h = 0;
    if (n <= CACHE_MAX_WORD) {
        h = hash_bytes(w, n);
        const CacheSlot *c = cache_find(b, w, n, h);
        if (c) {
            for (uint32_t i = 0; i < c->ids_len; i++)
                token_list_push(out, b->cids[c->ids_off + i]);
            return;
        }
    }
    bpe_merge_word(b, w, n);
    size_t first = out->n;
    for (int i = 0; i >= 0; i = b->sym[i].next)
        token_list_push(out, b->sym[i].id);
    if (n <= CACHE_MAX_WORD) cache_insert(b, w, n, h, out->ids + first, out->n - first);
}

static void bpe_encode(Tokenizer *t, const uint8_t *text, size_t len, TokenList *out) {
    Bpe *b = t->impl;
    for (size_t i = 0; i < len;) {
        size_t end = pretoken_end(text, len, i);
        encode_word(b, text + i, end - i, out);
        i = end;
    }
}

static const uint8_t *bpe_token_bytes(const Tokenizer *t, int id, size_t *len) {
    const Bpe *b = t->impl;
    *len = b->off[id + 1] - b->off[id];
    return b->bytes + b->off[id];
}

static int bpe_save(const Tokenizer *t, const char *dir) {
    const Bpe *b = t->impl;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/encoder.json", dir) >= (int)sizeof path)
        return loom_fail("%.200s...: path too long", dir);
    if (write_file_atomic(path, b->vocab_text, b->vocab_len)) return -1;
    snprintf(path, sizeof path, "%s/vocab.bpe", dir); // shorter than the one above
    return write_file_atomic(path, b->merges_text, b->merges_len);
}

static void bpe_free(void *impl) {
    Bpe *b = impl;
    if (!b) return;
    free(b->bytes);
    free(b->off);
    free(b->merges);
    free(b->cache);
    free(b->ckeys);
    free(b->cids);
    free(b->sym);
    free(b->heap);
    free(b->batch);
    free(b->vocab_text);
    free(b->merges_text);
    free(b);
}

static const TokenizerOps bpe_ops = {"gpt2", bpe_encode, bpe_token_bytes, bpe_save, bpe_free};

// ---------------------------------------------------------------------------------------------
// Loading.

// GPT-2's byte-to-unicode alphabet, inverted: code point -> byte, or -1.
static int alphabet_byte(uint32_t c) {
    if ((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF))
        return (int)c;
    // the other bytes, 0..32, 127..160 and 173, are U+0100 + their index in that list
    if (c < 0x100 || c >= 0x100 + 68) return -1;
    int k = (int)(c - 0x100);
    return k < 33 ? k : k < 67 ? 127 + (k - 33) : 173;
}

// Converts a token written in the alphabet (UTF-8, s[0, n)) to raw bytes in out (room for n
// bytes; the raw form is never longer). Returns the raw length, or -1 with a message.
static long token_to_bytes(const char *path, const char *s, size_t n, uint8_t *out) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t c;
        size_t adv = utf8_next((const uint8_t *)s + i, n - i, &c);
        int byte = alphabet_byte(c);
        if (c == INVALID_CP)
            return loom_fail("%s: token \"%.*s\" is not valid UTF-8", path, (int)n, s);
        if (byte < 0)
            return loom_fail("%s: token \"%.*s\" contains U+%04X, which is not in GPT-2's "
                             "byte alphabet (not a byte-level BPE file?)",
                             path, (int)n, s, (unsigned)c);
        out[k++] = (uint8_t)byte;
        i += adv;
    }
    if (!k) return loom_fail("%s: empty token", path);
    return (long)k;
}

typedef struct { // bytes -> id, used while loading
    int *slot;   // token id or -1
    size_t mask;
} VocabMap;

static int vocab_find(const Bpe *b, const VocabMap *m, const uint8_t *p, size_t n) {
    for (size_t i = hash_bytes(p, n) & m->mask;; i = (i + 1) & m->mask) {
        int id = m->slot[i];
        if (id < 0) return -1;
        if (b->off[id + 1] - b->off[id] == n && !memcmp(b->bytes + b->off[id], p, n)) return id;
    }
}

// Parses the token -> id JSON object into b->bytes/off/vocab and the map.
static int load_vocab(Bpe *b, VocabMap *map, const char *path) {
    cJSON *root = cJSON_ParseWithLength(b->vocab_text, b->vocab_len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return loom_fail("%s: not a JSON object of token -> id (malformed encoder.json?)", path);
    }
    int n = cJSON_GetArraySize(root);
    if (n < 256 || n > (1 << 24)) {
        cJSON_Delete(root);
        return loom_fail("%s: %d tokens; a byte-level BPE vocabulary has 256 to 16777216", path, n);
    }
    // token bytes, first in file order, then copied into id order
    size_t cap = 0;
    for (cJSON *it = root->child; it; it = it->next)
        cap += strlen(it->string);
    uint8_t *tmp = xmalloc(cap + 1);
    uint32_t *tmp_off = xmalloc((size_t)n * sizeof(uint32_t)), *len = xcalloc(n, sizeof(uint32_t));
    int *order = xmalloc((size_t)n * sizeof(int)); // order[id] = position in the file
    for (int i = 0; i < n; i++)
        order[i] = -1;
    size_t used = 0;
    int k = 0, rc = 0;
    for (cJSON *it = root->child; it && !rc; it = it->next, k++) {
        double v = it->valuedouble;
        if (!cJSON_IsNumber(it) || !(v >= 0 && v < n) || v != (double)(int)v) {
            rc = loom_fail("%s: token \"%.60s\" has id %s; ids must be integers 0..%d", path,
                           it->string, cJSON_IsNumber(it) ? "out of range" : "not a number", n - 1);
            break;
        }
        int id = (int)v;
        if (order[id] >= 0) {
            rc = loom_fail("%s: id %d is used twice (\"%.60s\")", path, id, it->string);
            break;
        }
        long m = token_to_bytes(path, it->string, strlen(it->string), tmp + used);
        if (m < 0) {
            rc = -1;
            break;
        }
        order[id] = k;
        tmp_off[k] = (uint32_t)used;
        len[id] = (uint32_t)m;
        used += (size_t)m;
    }
    cJSON_Delete(root);
    if (!rc) { // n distinct ids in 0..n-1: every id is present
        b->vocab = n;
        b->bytes = xmalloc(used + 1);
        b->off = xmalloc(((size_t)n + 1) * sizeof(uint32_t));
        uint32_t at = 0;
        for (int id = 0; id < n; id++) {
            b->off[id] = at;
            memcpy(b->bytes + at, tmp + tmp_off[order[id]], len[id]);
            at += len[id];
        }
        b->off[n] = at;
        map->mask = pow2_at_least(2 * (size_t)n) - 1;
        map->slot = xmalloc((map->mask + 1) * sizeof(int));
        memset(map->slot, 0xff, (map->mask + 1) * sizeof(int));
        for (int id = 0; id < n && !rc; id++) {
            const uint8_t *p = b->bytes + b->off[id];
            size_t plen = b->off[id + 1] - b->off[id];
            if (vocab_find(b, map, p, plen) >= 0) {
                rc = loom_fail("%s: token \"%.*s\" appears twice", path, (int)plen, p);
                break;
            }
            size_t i = hash_bytes(p, plen) & map->mask;
            while (map->slot[i] >= 0)
                i = (i + 1) & map->mask;
            map->slot[i] = id;
        }
    }
    free(tmp);
    free(tmp_off);
    free(len);
    free(order);
    return rc;
}

// Parses the merges file into the merge table (needs the vocabulary).
static int load_merges(Bpe *b, const VocabMap *map, const char *path) {
    char *text = b->merges_text;
    size_t nlines = 1;
    for (size_t i = 0; i < b->merges_len; i++)
        nlines += text[i] == '\n';
    if (nlines > (1u << 30)) // ranks and line numbers are int
        return loom_fail("%s: %zu lines is too many merges", path, nlines);
    b->merge_mask = pow2_at_least(2 * nlines) - 1;
    b->merges = xmalloc((b->merge_mask + 1) * sizeof(MergeSlot));
    for (size_t i = 0; i <= b->merge_mask; i++)
        b->merges[i].rank = -1;
    uint8_t *buf = xmalloc(b->merges_len + 1);
    int rank = 0, lineno = 0, rc = 0;
    for (size_t pos = 0; pos < b->merges_len && !rc;) {
        const char *line = text + pos;
        const char *nl = memchr(line, '\n', b->merges_len - pos);
        size_t n = nl ? (size_t)(nl - line) : b->merges_len - pos;
        pos += n + 1;
        lineno++;
        if (n && line[n - 1] == '\r') n--;
        if (!n || (lineno == 1 && n >= 8 && !memcmp(line, "#version", 8))) continue;
        const char *sp = memchr(line, ' ', n);
        if (!sp || sp == line || sp == line + n - 1 || memchr(sp + 1, ' ', n - (sp + 1 - line))) {
            rc = loom_fail("%s:%d: expected a merge \"a b\" (two tokens and one space), got "
                           "\"%.*s\"",
                           path, lineno, (int)(n < 60 ? n : 60), line);
            break;
        }
        size_t na = (size_t)(sp - line);
        char where[4200];
        snprintf(where, sizeof where, "%s:%d", path, lineno);
        long la = token_to_bytes(where, line, na, buf);
        long lb = la < 0 ? -1 : token_to_bytes(where, sp + 1, n - na - 1, buf + la);
        if (la < 0 || lb < 0) {
            rc = -1;
            break;
        }
        int a = vocab_find(b, map, buf, (size_t)la);
        int c = vocab_find(b, map, buf + la, (size_t)lb);
        int m = vocab_find(b, map, buf, (size_t)(la + lb));
        if (a < 0 || c < 0 || m < 0) {
            rc = loom_fail("%s:%d: merge \"%.*s\" uses or makes a token that is not in the "
                           "vocabulary",
                           path, lineno, (int)(n < 60 ? n : 60), line);
            break;
        }
        // insert; a repeated pair takes the later rank, as GPT-2's dict(zip(...)) does
        uint64_t key = merge_key(a, c);
        size_t i = merge_index(key, b->merge_mask);
        while (b->merges[i].rank >= 0 && b->merges[i].key != key)
            i = (i + 1) & b->merge_mask;
        b->merges[i] = (MergeSlot){key, rank++, m};
    }
    free(buf);
    return rc;
}

// Builds the tokenizer from b->vocab_text and b->merges_text (owned by b); frees b on failure.
static Tokenizer *bpe_open(Bpe *b, const char *vocab_name, const char *merges_name) {
    VocabMap map = {0};
    int rc = 0;
    // token offsets are 32-bit: the raw bytes of all tokens (never more than the file) must fit
    if (b->vocab_len >= UINT32_MAX)
        rc =
            loom_fail("%s: %zu bytes is too large for a vocabulary file", vocab_name, b->vocab_len);
    if (!rc) rc = load_vocab(b, &map, vocab_name);
    for (int byte = 0; byte < 256 && !rc; byte++) {
        uint8_t c = (uint8_t)byte;
        b->byte_tok[byte] = vocab_find(b, &map, &c, 1);
        if (b->byte_tok[byte] < 0)
            rc = loom_fail("%s: no token for byte 0x%02x (not a byte-level BPE vocabulary)",
                           vocab_name, byte);
    }
    if (!rc) rc = load_merges(b, &map, merges_name);
    int eot = rc ? -1 : vocab_find(b, &map, (const uint8_t *)"<|endoftext|>", 13);
    free(map.slot);
    if (rc) {
        bpe_free(b);
        return NULL;
    }
    b->cache_mask = 4095;
    b->cache = xcalloc(b->cache_mask + 1, sizeof(CacheSlot));
    Tokenizer *t = xcalloc(1, sizeof *t);
    *t = (Tokenizer){.ops = &bpe_ops, .vocab_size = b->vocab, .eot = eot, .impl = b};
    return t;
}

Tokenizer *tokenizer_open_gpt2_files(const char *vocab_json, const char *merges) {
    Bpe *b = xcalloc(1, sizeof *b);
    b->vocab_text = read_file(vocab_json, &b->vocab_len);
    if (b->vocab_text) b->merges_text = read_file(merges, &b->merges_len);
    if (!b->merges_text) {
        bpe_free(b);
        return NULL;
    }
    return bpe_open(b, vocab_json, merges);
}

Tokenizer *tokenizer_open_gpt2_mem(const char *vocab_name, const void *vocab, size_t vocab_len,
                                   const char *merges_name, const void *merges, size_t merges_len) {
    Bpe *b = xcalloc(1, sizeof *b);
    b->vocab_text = xmalloc(vocab_len + 1);
    memcpy(b->vocab_text, vocab, vocab_len);
    b->vocab_text[vocab_len] = 0;
    b->vocab_len = vocab_len;
    b->merges_text = xmalloc(merges_len + 1);
    memcpy(b->merges_text, merges, merges_len);
    b->merges_text[merges_len] = 0;
    b->merges_len = merges_len;
    return bpe_open(b, vocab_name, merges_name);
}

Tokenizer *tokenizer_open_gpt2(const char *dir) {
    static const char *pairs[][2] = {{"encoder.json", "vocab.bpe"}, {"vocab.json", "merges.txt"}};
    char v[4096], m[4096];
    for (int i = 0; i < 2; i++) {
        if (snprintf(v, sizeof v, "%s/%s", dir, pairs[i][0]) >= (int)sizeof v ||
            snprintf(m, sizeof m, "%s/%s", dir, pairs[i][1]) >= (int)sizeof m) {
            loom_fail("%.200s...: path too long", dir);
            return NULL;
        }
        FILE *f = fopen(v, "rb");
        if (!f) continue;
        fclose(f);
        return tokenizer_open_gpt2_files(v, m);
    }
    loom_fail("%s: no encoder.json or vocab.json here (GPT-2 BPE needs encoder.json + vocab.bpe, "
              "or vocab.json + merges.txt)",
              dir);
    return NULL;
}
