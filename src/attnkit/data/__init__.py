"""Data: vocabularies, the built-in task generators (text pairs, text-line images, synthesised
speech, scenes with captions and questions), audio features and readers for the user's own
files."""

from attnkit.data.audio.features import (
    MelStream,
    feature_statistics,
    log_mel,
    log_mel_stream,
    mel_filterbank,
    n_frames,
    normalize_features,
    pad_features,
    resample,
)
from attnkit.data.audio.files import read_wav, write_wav
from attnkit.data.corpora.image_folders import (
    CaptionedImage,
    CaptionedImages,
    ImageFiles,
    ImageQuestion,
    load_image,
    read_caption_folder,
    read_question_folder,
    stack_images,
    write_caption_folder,
    write_question_folder,
)
from attnkit.data.corpora.line_folders import (
    MAX_WIDTH,
    JoinedLines,
    LineFolder,
    load_line_image,
    pad_images,
    read_line_folder,
    write_line_folder,
)
from attnkit.data.corpora.speech_sets import FeaturesOnDisk, SpeechSet
from attnkit.data.corpora.tsv import MAX_CHARS, read_tsv
from attnkit.data.corpora.utterances import read_manifest
from attnkit.data.paths import inside, regular_file
from attnkit.data.vocab.subword import SubwordVocab
from attnkit.data.vocab.vocabularies import (
    CharVocab,
    WordVocab,
    build_vocab,
    load_vocab,
    pad_batch,
    vocab_settings,
)
from attnkit.data.worlds.lines import (
    ALPHABET,
    available_fonts,
    generate_lines,
    iter_lines,
    render_line,
)
from attnkit.data.worlds.scenes import Scene, captioned_images, generate_scenes, question_set
from attnkit.data.worlds.speech import (
    Utterance,
    plan_utterances,
    speech_dataset,
    utterance_audio,
    utterances_audio,
)
from attnkit.data.worlds.synthesis import synthesize
from attnkit.data.worlds.text_tasks import DATE_LOCALES, NUMBER_LANGUAGES, generate_pairs
from attnkit.errors import DataError

__all__ = [
    "ALPHABET",
    "DATE_LOCALES",
    "MAX_CHARS",
    "MAX_WIDTH",
    "NUMBER_LANGUAGES",
    "CaptionedImage",
    "CaptionedImages",
    "CharVocab",
    "DataError",
    "FeaturesOnDisk",
    "ImageFiles",
    "ImageQuestion",
    "JoinedLines",
    "LineFolder",
    "MelStream",
    "Scene",
    "SpeechSet",
    "SubwordVocab",
    "Utterance",
    "WordVocab",
    "available_fonts",
    "build_vocab",
    "captioned_images",
    "feature_statistics",
    "generate_lines",
    "inside",
    "generate_pairs",
    "generate_scenes",
    "iter_lines",
    "load_image",
    "load_line_image",
    "load_vocab",
    "log_mel",
    "log_mel_stream",
    "mel_filterbank",
    "n_frames",
    "normalize_features",
    "pad_batch",
    "vocab_settings",
    "pad_features",
    "pad_images",
    "plan_utterances",
    "question_set",
    "read_caption_folder",
    "read_line_folder",
    "read_manifest",
    "read_question_folder",
    "read_tsv",
    "read_wav",
    "regular_file",
    "render_line",
    "resample",
    "speech_dataset",
    "stack_images",
    "synthesize",
    "utterance_audio",
    "utterances_audio",
    "write_caption_folder",
    "write_line_folder",
    "write_question_folder",
    "write_wav",
]
