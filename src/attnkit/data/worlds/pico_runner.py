"""Speaks utterances with SVOX Pico (a hidden-Markov-model synthesiser, through the PyPI
package py-nanotts), each in a freshly forked process.

    python pico_runner.py < items.json

items.json: a JSON list of {text, voice, speed, pitch, out}: voice one of Pico's languages
(en-US, en-GB, ...), speed and pitch multipliers (1: the voice's own), out the 16 kHz mono
16-bit WAV file to write. Pico keeps state from one utterance to the next inside its library
(the same text comes out slightly different after another one), so each utterance is spoken by
a child forked before any synthesis: the same item gives the same samples, bit for bit.

Run as a script by :func:`attnkit.data.worlds.synthesis.pico_many`, apart from the caller's process
(which may hold threads that a fork would not copy); it imports nothing of attnkit.
"""

import json
import os
import sys
import wave

RATE = 16000


def speak(tts, item: dict) -> int:
    """Write ``item``'s WAV in a forked child; its exit status."""
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            pcm = tts.speak(
                item["text"], voice=item["voice"], speed=item["speed"], pitch=item["pitch"]
            )
            with wave.open(item["out"], "wb") as out:
                out.setnchannels(1)
                out.setsampwidth(2)
                out.setframerate(RATE)
                out.writeframes(pcm)
            status = 0
        except Exception as exc:
            print(f"{item['voice']} {item['text']!r}: {exc}", file=sys.stderr)
        finally:
            os._exit(status)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def main() -> int:
    # untyped, and not among pyproject.toml's ignore_missing_imports modules
    from py_nanotts import NanoTTS  # type: ignore[import-untyped]

    items = json.load(sys.stdin)
    tts = NanoTTS()
    return max((speak(tts, item) for item in items), default=0)


if __name__ == "__main__":
    raise SystemExit(main())
