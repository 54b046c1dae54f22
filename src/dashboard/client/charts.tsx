/** Charts: tiny SVG sparklines for tables, uPlot for the time series of one queue. */
import { useEffect, useRef } from "preact/hooks";
import uPlot from "uplot";
import type { MinuteSample } from "./api";

/** A line of values, oldest first; `label` is what a screen reader hears. */
export function Sparkline({ values, label, tone = "ok", max }: { values: number[]; label: string; tone?: "ok" | "bad"; max?: number }) {
  const w = 120;
  const h = 28;
  const top = Math.max(max ?? 0, ...values, 1e-9);
  const step = values.length > 1 ? w / (values.length - 1) : w;
  const points = values.map((v, i) => `${(i * step).toFixed(1)},${(h - 2 - (v / top) * (h - 4)).toFixed(1)}`).join(" ");
  return (
    <svg class={`spark spark-${tone}`} width={w} height={h} viewBox={`0 0 ${w} ${h}`} role="img" aria-label={label}>
      <title>{label}</title>
      <polyline points={points} fill="none" stroke-width="1.5" />
    </svg>
  );
}

type Series = { label: string; values: Array<number | null>; color: string };

/**
 * A time series chart over per-minute samples. Percentile series are gappy (a minute without a
 * job has none), so their points are drawn too: a lone busy minute would otherwise be invisible.
 */
export function TimeChart({
  title,
  unit,
  times,
  series,
  points = false,
}: {
  title: string;
  unit: string;
  times: number[];
  series: Series[];
  points?: boolean;
}) {
  const el = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const width = () => Math.max(260, (el.current?.parentElement?.clientWidth ?? 400) - 20);
  useEffect(() => {
    if (!el.current) return;
    const opts: uPlot.Options = {
      width: width(),
      height: 180,
      legend: { show: true, live: false },
      cursor: { show: true, drag: { x: false, y: false } },
      scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(1, max)] } },
      axes: [{ stroke: "#555" }, { stroke: "#555", size: 60, values: (_u, ticks) => ticks.map((t) => `${fmt(t)}${unit ? ` ${unit}` : ""}`) }],
      series: [
        {},
        ...series.map((s) => ({
          label: s.label,
          stroke: s.color,
          width: 1.5,
          spanGaps: false,
          ...(points ? { points: { show: true, size: 6, fill: s.color } } : {}),
        })),
      ],
    };
    plot.current = new uPlot(opts, [times.map((t) => t / 1000), ...series.map((s) => s.values)] as uPlot.AlignedData, el.current);
    const resize = () => plot.current?.setSize({ width: width(), height: 180 });
    window.addEventListener("resize", resize);
    return () => {
      window.removeEventListener("resize", resize);
      plot.current?.destroy();
      plot.current = null;
    };
    // Rebuilt when the set of series changes; data updates go through setData below.
  }, [series.length, unit]);
  useEffect(() => {
    plot.current?.setData([times.map((t) => t / 1000), ...series.map((s) => s.values)] as uPlot.AlignedData);
  }, [times, series]);
  const last = series.map((s) => `${s.label} ${fmtLast(s.values)}${unit ? ` ${unit}` : ""}`).join(", ");
  return (
    <figure class="chart">
      <figcaption>{title}</figcaption>
      <div ref={el} role="img" aria-label={`${title}; latest minute: ${last}`} />
    </figure>
  );
}

function fmt(n: number): string {
  return n >= 1000 ? `${(n / 1000).toFixed(n >= 10_000 ? 0 : 1)}k` : String(Math.round(n * 10) / 10);
}
function fmtLast(values: Array<number | null>): string {
  for (let i = values.length - 1; i >= 0; i--) if (values[i] !== null && values[i] !== undefined) return fmt(values[i]!);
  return "none";
}

/** The three charts of a queue: throughput, wait time and run time percentiles. */
export function QueueCharts({ history }: { history: MinuteSample[] }) {
  const times = history.map((h) => h.t);
  const pct = (pick: (h: MinuteSample) => MinuteSample["waitMs"], k: "p50" | "p95" | "p99") => history.map((h) => pick(h)?.[k] ?? null);
  /** The p50, p95 and p99 lines of one duration, in the same colours on every chart. */
  const percentiles = (pick: (h: MinuteSample) => MinuteSample["waitMs"]) => [
    { label: "p50", values: pct(pick, "p50"), color: "#1f5fbf" },
    { label: "p95", values: pct(pick, "p95"), color: "#b26a00" },
    { label: "p99", values: pct(pick, "p99"), color: "#c62828" },
  ];
  const completed = history.reduce((n, h) => n + h.completed, 0);
  const failed = history.reduce((n, h) => n + h.failed, 0);
  const latestRun = [...history].reverse().find((h) => h.runMs !== null);
  return (
    <>
      <p class="chart-summary">
        Last hour: {completed.toLocaleString("en")} completed, {failed.toLocaleString("en")} failed
        {completed + failed > 0 ? ` (${((100 * failed) / (completed + failed)).toFixed(1)}% failure rate)` : ""}
        {latestRun?.runMs && latestRun.waitMs
          ? `; latest minute with jobs: wait p50 ${fmt(latestRun.waitMs.p50)} ms, run p50 ${fmt(latestRun.runMs.p50)} ms, p95 ${fmt(latestRun.runMs.p95)} ms`
          : ""}
      </p>
      <div class="charts">
        <TimeChart
          title="Throughput (jobs per minute)"
          unit=""
          times={times}
          series={[
            { label: "completed", values: history.map((h) => h.completed), color: "#1a7f37" },
            { label: "failed", values: history.map((h) => h.failed), color: "#c62828" },
          ]}
        />
        <TimeChart title="Wait time, due to start (ms)" unit="ms" points times={times} series={percentiles((h) => h.waitMs)} />
        <TimeChart title="Run time (ms)" unit="ms" points times={times} series={percentiles((h) => h.runMs)} />
      </div>
    </>
  );
}
