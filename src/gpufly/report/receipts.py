"""The receipts a saved profile or tune run carries, as the report shows them (terminal and page): what the
figures were measured on (device, versions, steps, batch), how noisy the machine was (the interval, the noise
floor, the noisy mark and why), and why nothing was measured where nothing was. The report keeps what the source
file says and adds nothing of its own."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpufly.i18n import gettext as _

if TYPE_CHECKING:
    from gpufly.report.build import TuneSummary

MISSING = "N/A"


def tune_receipt(tuned: TuneSummary) -> str:
    """What a tune run measured on and how noisy the machine was, as far as its results file says."""
    parts = [_("device {device}").format(device=tuned.device or _("not recorded"))]
    parts += [f"{name} {version}" for name, version in tuned.versions.items()]
    if tuned.steps is not None:
        parts.append(_("{steps} steps per trial").format(steps=tuned.steps))
    parts.append(_("batch not reported") if tuned.batch_size is None
                 else _("batch {batch} (the baseline's)").format(batch=tuned.batch_size))
    if tuned.noise_floor is not None:
        parts.append(_("noise floor {floor} (the baseline's throughput over {runs} runs)").format(
            floor=f"{tuned.noise_floor:.1%}", runs=tuned.baseline_runs))
    else:
        parts.append(_("no noise floor (the baseline ran once, or the file predates it)"))
    return "; ".join(parts)


def _ms(low: Any, high: Any) -> str:
    """Two step times as one range in ms: '9.92-23.6 ms'."""
    if not isinstance(low, int | float) or not isinstance(high, int | float):
        return MISSING
    return f"{1000 * low:.3g}-{1000 * high:.3g} ms"


def profile_receipt(profiled: dict[str, Any]) -> list[str]:
    """The profile's receipt as `gpufly profile` records it: the device and versions, the steps and the batch; the
    noise floor and the load; why the run is noisy, and how the script ended when it did not end well. A summary
    without them (a hand-made one) gives none."""
    lines = []
    r = profiled.get("receipt")
    if isinstance(r, dict):
        device = (_("CPU ({cpu}, {threads} threads)").format(cpu=r.get("cpu") or _("unknown"),
                                                             threads=r.get("cpu_threads") or "?")
                  if r.get("device") in (None, "cpu") else str(r.get("device")))
        framework = (f"Keras {r.get('keras')} on TensorFlow {r.get('tensorflow')}" if r.get("framework") == "keras"
                     else f"torch {r.get('torch') or '?'}")
        batch = r.get("batch_size")
        lines.append(_("measured on {device}; {framework}, Python {python}, gpufly {gpufly}; {steps} steps ({measured} "
                       "measured); batch {batch}").format(
            device=device, framework=framework, python=r.get("python") or "?", gpufly=r.get("gpufly") or "?",
            steps=r.get("steps"), measured=r.get("measured_steps"),
            batch=_("not reported") if batch is None else batch))
    noise = profiled.get("noise")
    if isinstance(noise, dict):
        load = ""
        if noise.get("load_average_start") is not None:
            load = "; " + _("load average {start} -> {end} on {cpus} CPUs").format(
                start=noise["load_average_start"], end=noise.get("load_average_end"), cpus=noise.get("cpu_count"))
        lines.append(_("noise floor: steps {band} (p10-p90, {spread} of the median){load}").format(
            band=_ms(noise.get("p10_step_s"), noise.get("p90_step_s")),
            spread=f"{100 * float(noise.get('spread') or 0):.0f}%", load=load))
        if noise.get("noisy"):
            lines.append(_("noisy: {why}").format(why=noise.get("noisy_reason") or _("step times spread widely")))
    if profiled.get("crash") and profiled.get("measured_steps"):
        lines.append(_("the script stopped with {crash} (exit code {code})").format(
            crash=profiled["crash"], code=profiled.get("exit_code")))
    return lines


def no_step_reason(profiled: dict[str, Any]) -> str:
    """Why a profile has no measured step, from what the file says: the reason the profiler recorded
    (``no_step_reason``, in files that have it), else the script's error, its exit code, or neither."""
    if isinstance(profiled.get("no_step_reason"), str) and profiled["no_step_reason"]:
        return str(profiled["no_step_reason"])
    if profiled.get("crash"):
        return _("the script stopped before its first step: {crash} (exit code {code})").format(
            crash=profiled["crash"], code=profiled.get("exit_code"))
    if profiled.get("exit_code"):
        return _("the script exited with code {code} before its first step").format(code=profiled["exit_code"])
    return _("the file records no step of a training loop")


def profile_median(profiled: dict[str, Any]) -> str:
    """The median step with its interval and noisy mark: '20.0 ms [95%: 9.92-23.6 ms], noisy'."""
    median = profiled.get("median_step_s")
    step = MISSING if median is None else f"{1000 * median:.1f} ms"
    found = profiled.get("noise")
    noise: dict[str, Any] = found if isinstance(found, dict) else {}
    if noise.get("median_low_s") is not None and noise.get("median_high_s") is not None:
        step += f" [95%: {_ms(noise['median_low_s'], noise['median_high_s'])}]"
    if noise.get("noisy"):
        step += ", " + _("noisy")
    return step
