/**
 * The bloat soak's verdict (bench/pg-soak.ts) on made-up samples: a sawtooth is bounded, a climb
 * is not, and a run in which autovacuum never ran says it cannot tell instead of calling the
 * table's first growth bloat.
 */
import { describe, expect, it } from "vitest";
import { verdict, type SoakSample } from "../../bench/pg-soak.js";

const MB = 1024 * 1024;
const sample = (atS: number, deadTuples: number, totalMb: number, autovacuums: number): SoakSample => ({
  atS,
  processed: atS * 1_000,
  liveTuples: 5_000,
  deadTuples,
  heapBytes: totalMb * MB * 0.8,
  totalBytes: totalMb * MB,
  autovacuums,
});

describe("soak verdict", () => {
  it("calls a sawtooth of dead tuples at a steady size bounded", () => {
    const samples = [
      sample(5, 10_000, 10, 0),
      sample(10, 30_000, 20, 1),
      sample(15, 5_000, 20, 2),
      sample(20, 25_000, 21, 2),
      sample(25, 4_000, 21, 3),
      sample(30, 20_000, 21, 3),
    ];
    expect(verdict(samples).bounded).toBe(true);
  });

  it("calls a table that keeps growing while autovacuum runs not bounded", () => {
    const samples = [sample(5, 10_000, 10, 1), sample(10, 20_000, 20, 1), sample(15, 30_000, 30, 2), sample(20, 40_000, 40, 2)];
    const result = verdict(samples);
    expect(result.bounded).toBe(false);
    expect(result.reason).toMatch(/table size grew/);
  });

  it("says a run too short for any autovacuum cannot be judged", () => {
    const samples = [sample(5, 10_000, 10, 0), sample(10, 20_000, 20, 0), sample(15, 30_000, 30, 0), sample(20, 40_000, 40, 0)];
    const result = verdict(samples);
    expect(result.bounded).toBe(false);
    expect(result.reason).toMatch(/no autovacuum ran during the run/);
  });
});
