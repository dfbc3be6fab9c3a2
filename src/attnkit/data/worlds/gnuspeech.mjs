// Speaks utterances with GnuSpeech, an articulatory synthesiser (a tube model of the vocal
// tract driven by rules for its shapes; Hill, Manzara & Taube-Schock 1995), through the
// WebAssembly build of the npm package @echogarden/gnuspeech-wasm.
//
//   node gnuspeech.mjs PACKAGE_DIR < items.json
//
// items.json: a JSON list of {text, voice, tempo, pitch, tract, out}: voice one of the
// package's (male, female, large_child, small_child, baby), tempo its speaking rate (1: its
// own), pitch its pitch offset in semitones, tract an object of settings that replace those of
// the voice's file (voice_VOICE.txt: vocal_tract_length, breathiness, ...) or of the tube
// model's (trm.txt: loss_factor, throat_cutoff, ...), out the WAV file to write. The random
// intonation and pitch drift are turned off, so that the same item gives the same samples,
// bit for bit.
import { readFileSync, writeFileSync } from 'fs'
import path from 'path'
import { pathToFileURL } from 'url'

const pkg = process.argv[2]
const items = JSON.parse(readFileSync(0, 'utf8'))
const { default: init } = await import(pathToFileURL(path.join(pkg, 'wasm', 'gnuspeech.js')))
const wasm = await init({ print: () => {}, printErr: (line) => process.stderr.write(line + '\n') })
const data = '/data/en'
const read = (name) => new TextDecoder().decode(wasm.FS.readFile(`${data}/${name}`))
const control = read('trm_control_model.txt')
const tube = read('trm.txt')

const hasSetting = (text, name) => new RegExp(`^${name} = `, 'm').test(text)

function setting(text, name, value) {
  if (!hasSetting(text, name)) throw new Error(`gnuspeech has no setting ${name}`)
  return text.replace(new RegExp(`^${name} = .*$`, 'm'), `${name} = ${value}`)
}

// The voice's file and the tube model's with the item's settings put in: each setting must
// be in one of the two.
function withTract(voice, tract) {
  let voiceFile = read(`voice_${voice}.txt`)
  let tubeFile = tube
  for (const [name, value] of Object.entries(tract)) {
    if (hasSetting(voiceFile, name)) voiceFile = setting(voiceFile, name, value)
    else if (hasSetting(tube, name)) tubeFile = setting(tubeFile, name, value)
    else throw new Error(`gnuspeech has no setting ${name} (voice_${voice}.txt, trm.txt)`)
  }
  return [voiceFile, tubeFile]
}

function cString(text) {
  const bytes = new TextEncoder().encode(text + '\0')
  const at = wasm._malloc(bytes.length)
  wasm.HEAPU8.set(bytes, at)
  return at
}

for (const item of items) {
  const [voiceFile, tubeFile] = withTract(item.voice, item.tract ?? {})
  wasm.FS.writeFile(`${data}/voice_attnkit.txt`, voiceFile)
  wasm.FS.writeFile(`${data}/trm.txt`, tubeFile)
  let config = setting(control, 'voice_name', 'attnkit')
  config = setting(config, 'tempo', item.tempo)
  config = setting(config, 'pitch_offset', item.pitch)
  config = setting(config, 'intonation_drift', 0)
  config = setting(config, 'random_intonation', 0)
  wasm.FS.writeFile(`${data}/trm_control_model.txt`, config)
  const args = [item.text, '/out.wav', data, '/params.txt'].map(cString)
  wasm._GnuSpeech_synthesizeToFile(...args, 0)
  args.forEach((at) => wasm._free(at))
  writeFileSync(item.out, wasm.FS.readFile('/out.wav'))
}
