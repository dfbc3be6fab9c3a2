"""Audio: files of every codec read and written (:mod:`~attnkit.data.audio.files`), and the
features the speech models take, resampled, log-mel and padded
(:mod:`~attnkit.data.audio.features`). Imports nothing of attnkit's data but
:mod:`attnkit.data.paths`."""
