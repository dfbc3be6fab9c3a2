"""Augmentation: what every augmentation shares (:mod:`~attnkit.data.augment.augmentation`),
the changes to speech (:mod:`~attnkit.data.augment.audio_augment`) and to text-line images
(:mod:`~attnkit.data.augment.line_augment`). Imports :mod:`attnkit.data.audio`."""
