"""Audio and image fingerprints for the media metrics (``compare_audios``, ``compare_videos``).

OSWorld compares audio with librosa MFCCs aligned by fastdtw, and video frames with
``imagehash.phash``. Those libraries (librosa pulls in numba) are not guigym dependencies; the
same computations are small with numpy + scipy:

* :func:`load_audio`: mono float32 in [-1, 1] resampled to 22050 Hz (``librosa.load``'s
  defaults). WAV is read with scipy; other formats need the optional ``soundfile`` library.
* :func:`mfcc`: librosa's ``feature.mfcc`` defaults: 20 coefficients, 2048-point Hann STFT, hop
  512, centred frames zero-padded, 128 Slaney mel bands with Slaney area norm, power -> dB
  (ref 1, amin 1e-10, top_db 80), orthonormal DCT-II. Shape ``(20, n_frames)``.
* :func:`normalize_rows`: ``librosa.util.normalize(x, axis=1)`` (max-abs per row; all-zero rows
  unchanged).
* :func:`dtw_cosine`: exact DTW cost with cosine frame distance (fastdtw approximates this cost
  from above, so a score ``1 / (1 + cost)`` here is >= upstream's).
* :func:`phash`: ``imagehash.phash`` (32x32 grayscale, 2-D DCT-II, 8x8 low band vs its median);
  :func:`hamming` is the ``hash1 - hash2`` of imagehash.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from guigym.envs.desktop.evaluators.base import require

__all__ = ["SAMPLE_RATE", "load_audio", "mfcc", "normalize_rows", "dtw_cosine", "phash", "hamming"]

#: librosa.load's default output rate
SAMPLE_RATE = 22050
N_FFT, HOP, N_MELS, N_MFCC = 2048, 512, 128, 20


def _is_wav(path: str) -> bool:
    with open(path, "rb") as f:
        head = f.read(12)
    return head[:4] in (b"RIFF", b"RF64") and head[8:12] == b"WAVE"


def load_audio(path: str, metric: str = "compare_audios") -> np.ndarray:
    """``(n,)`` float32 mono samples at :data:`SAMPLE_RATE`. A non-WAV file needs ``soundfile``
    (MetricDependencyError otherwise); an unreadable file raises ValueError."""
    signal_mod = require("scipy.signal", "scipy", metric)
    if _is_wav(path):
        wavfile = require("scipy.io.wavfile", "scipy", metric)
        try:
            rate, data = wavfile.read(path)
        except Exception as e:  # noqa: BLE001 - scipy raises ValueError, and worse on some broken headers
            raise ValueError(f"{path}: not a readable WAV file ({e})") from None
    else:
        sf = require("soundfile", "soundfile", metric)
        try:
            data, rate = sf.read(path, always_2d=False)
        except RuntimeError as e:  # libsndfile: unknown format
            raise ValueError(f"{path}: {e}") from None
    data = np.asarray(data)
    if data.dtype.kind in "iu":  # PCM: scale as librosa (int16 / 32768, uint8 centred)
        info = np.iinfo(data.dtype)
        data = (data.astype(np.float64) - (0 if data.dtype.kind == "i" else (info.max + 1) / 2)) / (
            -info.min if data.dtype.kind == "i" else (info.max + 1) / 2)
    data = data.astype(np.float64)
    if data.ndim == 2:
        data = data.mean(axis=1)
    rate = int(rate)
    if rate != SAMPLE_RATE and data.size:
        g = math.gcd(rate, SAMPLE_RATE)
        data = signal_mod.resample_poly(data, SAMPLE_RATE // g, rate // g)
    return data.astype(np.float32)


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    """Slaney mel scale: linear below 1 kHz, logarithmic above."""
    f = np.asarray(f, dtype=np.float64)
    mel = f / (200.0 / 3)
    log_part = f >= 1000.0
    mel[log_part] = 15.0 + np.log(f[log_part] / 1000.0) / (np.log(6.4) / 27.0)
    return mel


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    f = m * (200.0 / 3)
    log_part = m >= 15.0
    f[log_part] = 1000.0 * np.exp((np.log(6.4) / 27.0) * (m[log_part] - 15.0))
    return f


def _mel_filters(sr: int) -> np.ndarray:
    """``(N_MELS, 1 + N_FFT // 2)`` Slaney-normalised triangular filters, 0 .. sr/2."""
    fft_freqs = np.linspace(0, sr / 2, 1 + N_FFT // 2)
    mel_f = _mel_to_hz(np.linspace(_hz_to_mel(np.array([0.0]))[0], _hz_to_mel(np.array([sr / 2.0]))[0], N_MELS + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    return weights * (2.0 / (mel_f[2:] - mel_f[:-2]))[:, None]


def mfcc(y: np.ndarray, sr: int = SAMPLE_RATE, metric: str = "compare_audios") -> np.ndarray:
    """``(N_MFCC, n_frames)`` MFCCs of mono ``y`` (librosa defaults, see the module doc)."""
    sp_fft = require("scipy.fft", "scipy", metric)
    y = np.pad(np.asarray(y, dtype=np.float64), N_FFT // 2)  # center=True, zero padding
    if y.size < N_FFT:
        y = np.pad(y, (0, N_FFT - y.size))
    n_frames = 1 + (y.size - N_FFT) // HOP
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)  # periodic Hann
    filters = _mel_filters(sr)
    frames = np.lib.stride_tricks.sliding_window_view(y, N_FFT)[::HOP][:n_frames]
    mel = np.empty((N_MELS, n_frames))
    for start in range(0, n_frames, 512):  # blocks keep a long song's spectrogram small
        block = frames[start:start + 512] * window
        power = np.abs(np.fft.rfft(block, axis=1)) ** 2
        mel[:, start:start + len(block)] = filters @ power.T
    db = 10.0 * np.log10(np.maximum(1e-10, mel))
    db = np.maximum(db, db.max() - 80.0)
    return sp_fft.dct(db, type=2, norm="ortho", axis=0)[:N_MFCC]


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """Each row divided by its max |value|; rows below the smallest normal float stay as they are."""
    length = np.abs(x).max(axis=1, keepdims=True)
    length[length < np.finfo(x.dtype).tiny] = 1.0
    return x / length


def dtw_cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Exact DTW cost between frame sequences ``a (n, d)`` and ``b (m, d)``: steps (1,0), (0,1),
    (1,1), each cell costing the cosine distance ``1 - cos`` of its frames (1 when a frame is all
    zeros; scipy would give NaN). Anti-diagonals are filled one at a time, O(n + m) memory."""
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        return math.inf

    def unit(x: np.ndarray) -> np.ndarray:
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        return np.divide(x, norms, out=np.zeros_like(x, dtype=np.float64), where=norms > 0)

    ua, ub = unit(np.asarray(a, dtype=np.float64)), unit(np.asarray(b, dtype=np.float64))
    # prev1[i + 1] / prev2[i + 1]: cost at row i on the last / second-to-last anti-diagonal
    prev2 = np.full(n + 1, np.inf)
    prev1 = np.full(n + 1, np.inf)
    for k in range(n + m - 1):
        i = np.arange(max(0, k - m + 1), min(k, n - 1) + 1)
        cost = 1.0 - np.einsum("ij,ij->i", ua[i], ub[k - i])
        best = np.zeros(1) if k == 0 else np.minimum(np.minimum(prev1[i], prev1[i + 1]), prev2[i])
        cur = np.full(n + 1, np.inf)
        cur[i + 1] = cost + best
        prev2, prev1 = prev1, cur
    return float(prev1[n])


def phash(image: Any) -> np.ndarray:
    """64 booleans: the perceptual hash of a PIL image (``imagehash.phash``, hash_size 8)."""
    from PIL import Image

    sp_fft = require("scipy.fft", "scipy", "compare_videos")
    pixels = np.asarray(image.convert("L").resize((32, 32), Image.Resampling.LANCZOS), dtype=np.float64)
    dct = sp_fft.dct(sp_fft.dct(pixels, axis=0), axis=1)
    low = dct[:8, :8]
    return (low > np.median(low)).flatten()


def hamming(h1: np.ndarray, h2: np.ndarray) -> int:
    """Number of differing bits of two :func:`phash` values."""
    return int(np.count_nonzero(h1 != h2))
