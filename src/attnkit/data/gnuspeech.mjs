// Speaks utterances with GnuSpeech, an articulatory synthesiser (a tube model of the vocal
// tract driven by rules for its shapes; Hill, Manzara & Taube-Schock 1995), through the
// WebAssembly build of the npm package @echogarden/gnuspeech-wasm.
//
//   node gnuspeech.mjs PACKAGE_DIR < items.json
//
// items.json: a JSON list of {text, voice, tempo, pitch, out}: voice one of the package's
// (male, female, large_child, small_child, baby), tempo its speaking rate (1: its own), pitch
// its pitch offset in semitones, out the WAV file to write. The random intonation and pitch
// drift are turned off, so that the same item gives the same samples, bit for bit.
import { readFileSync, writeFileSync } from 'fs'
import path from 'path'
import { pathToFileURL } from 'url'

const pkg = process.argv[2]
const items = JSON.parse(readFileSync(0, 'utf8'))
const { default: init } = await import(pathToFileURL(path.join(pkg, 'wasm', 'gnuspeech.js')))
const wasm = await init({ print: () => {}, printErr: (line) => process.stderr.write(line + '\n') })
const data = '/data/en'
const control = new TextDecoder().decode(wasm.FS.readFile(`${data}/trm_control_model.txt`))

function setting(text, name, value) {
  const line = new RegExp(`^${name} = .*$`, 'm')
  if (!line.test(text)) throw new Error(`trm_control_model.txt has no setting ${name}`)
  return text.replace(line, `${name} = ${value}`)
}

function cString(text) {
  const bytes = new TextEncoder().encode(text + '\0')
  const at = wasm._malloc(bytes.length)
  wasm.HEAPU8.set(bytes, at)
  return at
}

for (const item of items) {
  let config = setting(control, 'voice_name', item.voice)
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
