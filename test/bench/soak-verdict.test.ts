/**
 * The bloat soak's verdict (bench/pg-soak.ts) must be able to say "unbounded": planted sample
 * series, each a shape a leaking table would take, and a healthy sawtooth as the control.
 */
import { describe, expect, it } from "vitest";
import { verdict, type SoakSample } from "../../bench/pg-soak.js";

const MB = 1024 * 1024;

/** Twelve samples two seconds apart; `size` and `dead` give each one's table bytes and dead tuples. */
function series(size: (i: number) => number, dead: (i: number) => number): SoakSample[] {
  return Array.from({ length: 12 }, (_, i) => ({
    atS: 2 * (i + 1),
    processed: 3_000 * (i + 1),
    liveTuples: 1_500,
    deadTuples: dead(i),
    heapBytes: size(i) * 0.7,
    totalBytes: size(i),
    autovacuums: Math.floor(i / 2),
  }));
}

/** Dead tuples pile up for three samples, then a vacuum clears them: the healthy shape. */
const sawtooth = (i: number) => 2_000 + 6_000 * (i % 3);

describe("bloat soak verdict", () => {
  it("accepts a table that levels off while vacuum keeps clearing dead tuples", () => {
    const r = verdict(series(() => 8 * MB, sawtooth));
    expect(r).toMatchObject({ bounded: true });
    expect(r.reason).toMatch(/second half peaks/);
  });

  it("catches a table that keeps growing (linear growth, vacuum or not)", () => {
    const r = verdict(series((i) => (4 + 2 * i) * MB, sawtooth));
    expect(r.bounded).toBe(false);
    expect(r.reason).toMatch(/table size grew/);
  });

  it("catches dead tuples that never fall back (vacuum not keeping up), even at a steady size", () => {
    const r = verdict(
      series(
        () => 8 * MB,
        (i) => 1_000 * (i + 1),
      ),
    );
    expect(r.bounded).toBe(false);
    expect(r.reason).toMatch(/dead tuples never fell/);
  });

  it("refuses to judge a run too short to have two halves", () => {
    const r = verdict(series(() => MB, sawtooth).slice(0, 3));
    expect(r.bounded).toBe(false);
    expect(r.reason).toMatch(/run longer/);
  });
});
