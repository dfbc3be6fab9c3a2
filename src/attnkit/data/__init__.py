"""Data: vocabularies, the built-in task generators and readers for the user's own files."""

from attnkit.data.audio import (
    log_mel,
    mel_filterbank,
    normalize_features,
    pad_features,
    read_wav,
    resample,
)
from attnkit.data.speech import (
    SpeechSet,
    Utterance,
    plan_utterances,
    read_manifest,
    speech_dataset,
    synthesize,
)
from attnkit.data.text_tasks import DATE_LOCALES, NUMBER_LANGUAGES, generate_pairs
from attnkit.data.tsv import DataError, read_tsv
from attnkit.data.vocab import CharVocab, pad_batch

__all__ = [
    "DATE_LOCALES",
    "NUMBER_LANGUAGES",
    "CharVocab",
    "DataError",
    "SpeechSet",
    "Utterance",
    "generate_pairs",
    "log_mel",
    "mel_filterbank",
    "normalize_features",
    "pad_batch",
    "pad_features",
    "plan_utterances",
    "read_manifest",
    "read_tsv",
    "read_wav",
    "resample",
    "speech_dataset",
    "synthesize",
]
