#!/usr/bin/env node
// fanout's byte-level BPE against HF's own tokenizers library (Rust, through its
// Node bindings, installed by third_party/install_deps.sh into third_party/node):
//   (a) HF trains a ByteLevel BPE on a 1.3 MB corpus; fanout loads its
//       tokenizer.json and must give HF's ids and decode on the whole corpus;
//   (b) HF loads tokenizer.json files fanout wrote (that one rewritten, the byte
//       tokenizer's, and one `fanout tokenizer train` made) and must give fanout's
//       ids and decode.
// Usage: hf_tokenizers.js FANOUT_BINARY WORK_DIR NODE_PREFIX
// Exit 0 pass, 1 fail, 77 skipped (the package is missing), with one line why.

'use strict';
const fs = require('fs');
const path = require('path');
const {spawnSync} = require('child_process');

const [fanout, workDir, nodePrefix] = process.argv.slice(2);
if (!fanout || !workDir || !nodePrefix) {
  console.error('usage: hf_tokenizers.js FANOUT_BINARY WORK_DIR NODE_PREFIX');
  process.exit(2);
}
let hf;
try {
  hf = require(path.resolve(nodePrefix, 'node_modules', 'tokenizers'));
} catch (e) {
  console.log(
      `SKIPPED: HF tokenizers is not installed under ${nodePrefix} ` +
      `(third_party/install_deps.sh installs it): ${e.message.split('\n')[0]}`);
  process.exit(77);
}
fs.mkdirSync(workDir, {recursive: true});

// --- The corpus: deterministic, 1.3 MB, every kind of piece the regex makes ---
function makeCorpus() {
  let seed = 12345;
  const rand = (n) => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return Math.floor((seed / 2147483648) * n);
  };
  const pick = (a) => a[rand(a.length)];
  const words =
      ('the of and to in a is that for it as was with be by on not he I this are or ' +
       'his from at which but have an they you were her she there been one all we their time ' +
       'model training tokenizer gradient device parallel shard layer attention token')
          .split(' ');
  const unicode = [
    'café',
    'naïve',
    'Zürich',
    'Ελληνικά',
    'русский',
    '日本語の文章',
    '中文',
    '한국어',
    'العربية',
    'हिन्दी',
    'e\u0301t\u00e9',
    'ﬁne',
    'Ǆemal',
    'İstanbul',
    'straße',
    '🎉',
    '😀👍🏽',
    '🇫🇷',
    '∑x²',
    '½',
    'Ⅳ',
    '٣٤',
    '①②',
    '𝟘𝟙',
    '𠀀𠀁',
    '\u00a0',
    '\u3000',
    '\u2028',
    '\u200b',
    '\u0085',
    '\ufeff'
  ];
  const punct = [
    '.', ',', '!', '?', '...', ';', ':',  '—', '«', '»', '“', '”', '(', ')', '"', '-', '--',
    '#', '$', '%', '&', '*',   '/', '\\', '[', ']', '{', '}', '<', '>', '=', '+', '|'
  ];
  const contractions = [
    'don\'t', 'I\'m', 'we\'re', 'they\'ve', 'you\'ll', 'he\'d', 'it\'s', 'IT\'S', '\'S', 'can\'t',
    'rock\'n\'roll', '\'\'', '\'', '\'re', '\'ll\'d'
  ];
  const spaces =
      [' ', '  ', '   ', '\t', '\n', '\n\n', '\n\n\n', ' \n', '\r\n', '\t\t', ' \t ', '    '];
  // Made-up words (many distinct pieces, so many merges) and code points from
  // the whole BMP and the planes above (every general category the regex sees).
  const syllables = 'ka to mi ra ne so lu be di fa ge ho ji qu str th ch sh ing ed er'.split(' ');
  const word = () => {
    let w = '';
    for (let k = 1 + rand(4); k > 0; --k) w += pick(syllables);
    return rand(5) === 0 ? w[0].toUpperCase() + w.slice(1) : w;
  };
  const codePoint = () => {
    let c;
    do c = rand(8) === 0 ? 0x10000 + rand(0x30000) : 0x80 + rand(0xFF80);
    while (c >= 0xD800 && c <= 0xDFFF);
    return String.fromCodePoint(c);
  };
  const specials = ['[EOT]', '[BOT]', '[PAD]', '[EOT][BOT]', '[EO', 'x[PAD]y', ' [EOT] '];
  const parts = [];
  let size = 0;
  while (size < 1300000) {
    const r = rand(100);
    let p;
    if (r < 30)
      p = pick(words);
    else if (r < 50)
      p = word();
    else if (r < 55)
      p = codePoint() + (rand(2) ? codePoint() : '');
    else if (r < 65)
      p = pick(unicode);
    else if (r < 75)
      p = pick(punct);
    else if (r < 82)
      p = pick(contractions);
    else if (r < 90)
      p = String(rand(r < 86 ? 100 : 10000000));
    else if (r < 91)
      p = pick(specials);
    else if (r < 92)
      p = String.fromCharCode(1 + rand(31));  // control characters
    else
      p = pick(words).toUpperCase();
    parts.push(p, rand(4) === 0 ? pick(spaces) : ' ');
    size += p.length + 1;
  }
  return parts.join('');
}

const failures = [];
function check(cond, what) {
  if (!cond) failures.push(what);
  console.log(`${cond ? 'ok  ' : 'FAIL'} ${what}`);
}

function firstDiff(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; ++i)
    if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

function sameIds(what, got, want) {
  const d = firstDiff(got, want);
  let detail = `${got.length} ids`;
  if (d >= 0) {
    detail = `first difference at ${d} of ${got.length} / ${want.length}: ` +
        `[${got.slice(Math.max(0, d - 3), d + 4)}] vs [${want.slice(Math.max(0, d - 3), d + 4)}]`;
  }
  check(d < 0, `${what}: ${detail}`);
}

// fanout's ids and decode for the corpus (`fanout tokenizer encode --json`).
function fanoutEncode(tokenizer, corpus, extraArgs = []) {
  const r = spawnSync(
      fanout,
      ['tokenizer', 'encode', '--tokenizer', tokenizer, '--data', corpus, '--json', ...extraArgs],
      {encoding: 'utf8', timeout: 120000, maxBuffer: 1 << 28});
  if (r.status !== 0) {
    throw new Error(
        `fanout tokenizer encode --tokenizer ${tokenizer} failed (${r.status}): ` +
        `${(r.stderr || '').trim()} ${r.error || ''}`);
  }
  process.stdout.write(`     ${r.stderr.trim()}\n`);
  return JSON.parse(r.stdout);
}

async function hfEncode(tokenizer, text) {
  const t0 = Date.now();
  const enc = await tokenizer.encode(text);
  const ids = enc.getIds();
  const seconds = (Date.now() - t0) / 1000;
  const decoded = await tokenizer.decode(ids, true);
  console.log(
      `     HF encoded ${(text.length / 1e6).toFixed(2)} M chars into ${ids.length} ` +
      `tokens in ${seconds.toFixed(3)} s`);
  return {ids, decoded};
}

// HF's node bindings have no ByteLevel decoder constructor: it is set in the JSON.
function withByteLevelDecoder(file) {
  const j = JSON.parse(fs.readFileSync(file, 'utf8'));
  j.decoder = {type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true};
  fs.writeFileSync(file, JSON.stringify(j, null, 2));
}

// HF loads `file`, which fanout wrote, and encodes the corpus as fanout does.
async function checkHfLoads(what, file, text, corpusFile) {
  const mine = fanoutEncode(file, corpusFile);
  const theirs = await hfEncode(hf.Tokenizer.fromFile(file), text);
  sameIds(`${what}: HF ids equal fanout's`, theirs.ids, mine.ids);
  check(theirs.decoded === mine.decoded, `${what}: HF decode equals fanout's`);
  return mine;
}

async function main() {
  const text = makeCorpus();
  const corpusFile = path.join(workDir, 'corpus.txt');
  fs.writeFileSync(corpusFile, text, 'utf8');
  const bytes = fs.statSync(corpusFile).size;
  check(bytes >= 1000000, `corpus is ${bytes} bytes (>= 1 MB)`);

  // The pre-tokenizer alone, on the whole corpus: HF's pieces joined in order.
  const pieces = hf.byteLevelPreTokenizer(false, true).preTokenizeString(text.slice(0, 200000));
  check(pieces.length > 30000, `HF ByteLevel pre-tokenizer gives ${pieces.length} pieces`);

  // (a) HF trains; fanout loads its file.
  const hfFile = path.join(workDir, 'hf_trained.json');
  const trained = new hf.Tokenizer(hf.BPE.empty());
  trained.setPreTokenizer(hf.byteLevelPreTokenizer(false, true));
  trained.train([corpusFile]);
  trained.addSpecialTokens(['[BOT]', '[EOT]', '[PAD]']);
  trained.save(hfFile, true);
  withByteLevelDecoder(hfFile);
  const hfTok = hf.Tokenizer.fromFile(hfFile);
  console.log(`     HF trained ${hfTok.getVocabSize(true)} tokens`);
  const theirs = await hfEncode(hfTok, text);
  const rewritten = path.join(workDir, 'hf_trained_rewritten_by_fanout.json');
  const mine = fanoutEncode(hfFile, corpusFile, ['--write-tokenizer', rewritten]);
  sameIds('(a) fanout ids on the HF-trained tokenizer equal HF\'s', mine.ids, theirs.ids);
  check(mine.decoded === theirs.decoded, '(a) fanout decode equals HF\'s');
  const eot = hfTok.tokenToId('[EOT]');
  check(eot !== null && mine.ids.includes(eot), `(a) the text's [EOT] encodes to its id ${eot}`);
  check(theirs.ids.length < bytes / 2, '(a) the merges compress the corpus');

  // (b) HF loads what fanout wrote.
  await checkHfLoads('(b) HF-trained, rewritten by fanout', rewritten, text, corpusFile);
  const byteFile = path.join(workDir, 'byte_tokenizer.json');
  fanoutEncode('byte', corpusFile, ['--write-tokenizer', byteFile]);
  const byteIds = await checkHfLoads('(b) byte tokenizer', byteFile, text, corpusFile);
  check(
      byteIds.decoded === text.replace(/\[(BOT|EOT|PAD)\]/g, ''),
      '(b) byte tokenizer decode is the corpus without special tokens');
  const hasTrain = spawnSync(fanout, ['tokenizer', 'train', '--help'], {timeout: 30000});
  if (hasTrain.status === 0) {
    const fanoutFile = path.join(workDir, 'fanout_trained.json');
    const r = spawnSync(
        fanout,
        ['tokenizer', 'train', '--data', corpusFile, '--vocab-size', '4000', '--out', fanoutFile],
        {encoding: 'utf8', timeout: 120000});
    check(r.status === 0, `fanout tokenizer train: ${(r.stdout + r.stderr).trim()}`);
    if (r.status === 0) await checkHfLoads('(b) fanout-trained', fanoutFile, text, corpusFile);
  } else {
    console.log('     (b) fanout-trained: `fanout tokenizer train` is not there yet');
  }
}

main().then(
    () => {
      if (failures.length > 0) {
        console.log(`${failures.length} check(s) failed: ${failures[0]}`);
        process.exit(1);
      }
      console.log('all checks passed');
    },
    (e) => {
      console.log(`FAIL ${e.message}`);
      process.exit(1);
    });
