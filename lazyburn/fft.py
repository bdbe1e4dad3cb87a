"""The array API's Fourier transform extension, as users see it: ``lazyburn.fft`` (found by
``hasattr(xp, "fft")`` on the namespace). A namespace over ``lazyburn.frontend.fft``, where the
functions are defined: the transforms are library calls of the device (``numpy.fft`` on the
host, ``torch.fft`` on CUDA), shown as such by ``lb.explain``; the frequencies and shifts are
the engine's own ops.
"""
from .frontend.fft import (fft, fftfreq, fftn, fftshift, hfft, ifft, ifftn, ifftshift, ihfft,
                           irfft, irfftn, rfft, rfftfreq, rfftn)

__all__ = ["fft", "fftfreq", "fftn", "fftshift", "hfft", "ifft", "ifftn", "ifftshift", "ihfft",
           "irfft", "irfftn", "rfft", "rfftfreq", "rfftn"]
