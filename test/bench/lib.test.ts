/**
 * The side-by-side runner of the benchmarks (bench/lib.ts), with fake subjects that record when
 * they are measured: runs interleave across subjects, each round starting one subject further
 * (A, B, C, then B, C, A, then C, A, B, ...), every figure is the
 * median of its runs, ratios pair the runs of a round, every run is kept, and the machine's load
 * is recorded at start and end.
 * No timing is asserted: the fakes return fixed numbers.
 */
import { describe, expect, it } from "vitest";
import { interleaved, median, pairedRatio, runSideBySide, type Subject } from "../../bench/lib.js";

/** A subject whose figures come from `values` in turn, logging each call as "name:figure". */
function fake(name: string, log: string[], values: number[]): Subject {
  let i = 0;
  const next = (figure: string) => {
    log.push(`${name}:${figure}`);
    return values[i++ % values.length]!;
  };
  return {
    name,
    bulk: async () => next("bulk"),
    single: async () => next("single"),
    processing: async (_jobs, concurrency) => next(`processing${concurrency}`),
    // One sample list per run: [v, 2v, ..., 100v], so (nearest rank) p50 = 51v and p99 = 100v.
    latency: async () => {
      const v = next("latency");
      return Array.from({ length: 100 }, (_, k) => (k + 1) * v);
    },
  };
}

describe("bench runner", () => {
  it("takes the median of an odd and of an even number of runs", () => {
    expect(median([5, 1, 3])).toBe(3);
    expect(median([4, 1, 3, 2])).toBe(2.5);
    expect(median([])).toBeNaN();
  });

  it("pairs ratios round by round and skips rounds without a usable peer figure", () => {
    expect(pairedRatio([10, 30, 20], [5, 50, 1])).toBe(2);
    expect(pairedRatio([10, 30, 20], [0, 15, NaN])).toBe(2);
    expect(pairedRatio([1], [])).toBeNaN();
  });

  it("interleaves the runs of the subjects, each round starting one further: A, B, C, B, C, A, C, A, B", async () => {
    const log: string[] = [];
    const subjects = ["A", "B", "C"].map((n) => fake(n, log, [1]));
    const results = await interleaved(subjects, 3, "bulk", (s) => s.bulk(1), String);
    expect(log).toEqual(["A:bulk", "B:bulk", "C:bulk", "B:bulk", "C:bulk", "A:bulk", "C:bulk", "A:bulk", "B:bulk"]);
    expect(results).toEqual([
      [1, 1, 1],
      [1, 1, 1],
      [1, 1, 1],
    ]);
    // Each subject's results are by round, whatever its place in the round.
    let call = 0;
    const byCall = await interleaved(
      ["A", "B", "C"].map((name) => ({ name })),
      2,
      "x",
      async (s) => `${s.name}${++call}`,
      String,
    );
    expect(byCall).toEqual([
      ["A1", "A6"],
      ["B2", "B4"],
      ["C3", "C5"],
    ]);
  });

  it("reports per figure the median of each subject's runs, every run, and the load at start and end", async () => {
    const log: string[] = [];
    // Three runs per figure: A's bulk runs give 10, 30, 20 (median 20); B's 5, 50, 1 (median 5).
    const a = fake("A", log, [10, 30, 20]);
    const b = fake("B", log, [5, 50, 1]);
    const report = await runSideBySide([a, b], { jobs: 1, single: 1, samples: 100, runs: 3 });

    const bulk = report.rows.find((r) => r.label.startsWith("bulk"))!;
    expect(bulk.runs).toEqual([
      [10, 30, 20],
      [5, 50, 1],
    ]);
    expect(bulk.values).toEqual([20, 5]);
    // The ratio pairs the runs of a round: 10/5, 30/50, 20/1 -> median 2 (not 20/5 = 4).
    expect(bulk.ratios).toEqual([2]);
    // Within one figure the subjects alternate run by run, the other one first every second round.
    expect(log.filter((l) => l.endsWith(":bulk"))).toEqual(["A:bulk", "B:bulk", "B:bulk", "A:bulk", "A:bulk", "B:bulk"]);

    // Latency: each run's percentile, then the median over runs (the fakes cycle on through
    // their values: A's latency runs come after its 12 throughput runs, so v = 10, 30, 20).
    const p50 = report.rows.find((r) => r.label.startsWith("latency p50"))!;
    expect(p50.unit).toBe("ms");
    expect(p50.runs[0]).toEqual([510, 1_530, 1_020]);
    expect(p50.values[0]).toBe(1_020);
    const p99 = report.rows.find((r) => r.label.startsWith("latency p99"))!;
    expect(p99.values[0]).toBe(2_000);

    // No subject has a cross-process latency or a memory figure: no such rows.
    expect(report.rows.some((r) => r.label.includes("cross-process") || r.label.includes("memory"))).toBe(false);
    expect(report.loadStart).toHaveLength(3);
    expect(report.loadEnd).toHaveLength(3);
    expect(report.runs).toBe(3);
  });

  it("runs only the memory figure when asked, interleaved and as medians", async () => {
    const log: string[] = [];
    const withMemory = (name: string, bytes: number[]): Subject => {
      let i = 0;
      return { ...fake(name, log, [1]), memory: async () => (log.push(`${name}:memory`), { used: bytes[i++]! }) };
    };
    const report = await runSideBySide(
      [withMemory("A", [90, 80, 85]), withMemory("B", [240, 230, 250])],
      { jobs: 1, single: 1, samples: 1, runs: 3 },
      { only: "memory" },
    );
    expect(log).toEqual(["A:memory", "B:memory", "B:memory", "A:memory", "A:memory", "B:memory"]);
    expect(report.rows).toHaveLength(1);
    expect(report.rows[0]!.values).toEqual([85, 240]);
  });
});
