/**
 * The lost-claim check of the fencing tests (issue #19): a claim the store forgets, as a promotion
 * of a replica that never received it does, must not hand out its token again.
 */
import { expect } from "vitest";
import type { Backend } from "../../src/backend/contract.js";
import { A, B, claimOne, mustGet } from "../conformance/fixtures.js";

/**
 * Claims job `id` (worker A), then runs the function `forget()` returned before the claim (it puts
 * the store back as it was then), then claims again (worker B): the second token is greater than
 * the lost one, the lost holder's completion is refused and the second holder's is applied.
 */
export async function expectLostClaimFenced(backend: Backend, id: string, forgetNextClaim: () => Promise<() => Promise<void>>): Promise<void> {
  const forget = await forgetNextClaim();
  const lost = await claimOne(backend, { worker: A, leaseMs: 60_000 });
  expect(lost.job.id).toBe(id);
  await forget();
  expect(await mustGet(backend, id)).toMatchObject({ state: "waiting", attempt: lost.job.attempt - 1 });

  const next = await claimOne(backend, { worker: B, leaseMs: 60_000 });
  expect(next.job).toMatchObject({ id, attempt: lost.job.attempt });
  expect(next.lease.token, "the claim after the lost one hands out a token the lost holder does not hold").not.toBe(lost.lease.token);
  expect(next.lease.token).toBeGreaterThan(lost.lease.token);
  expect(Number.isSafeInteger(next.lease.token)).toBe(true);
  // The lost holder retries its completion: refused, and the job stays with the second holder.
  expect(await backend.complete([{ lease: lost.lease, result: "from the lost claim" }])).toEqual(["stale"]);
  expect(await mustGet(backend, id)).toMatchObject({ state: "active", lease: { token: next.lease.token, worker: B } });
  expect(await backend.complete([{ lease: next.lease, result: "from the second claim" }])).toEqual(["applied"]);
  expect(await mustGet(backend, id)).toMatchObject({ state: "completed", result: "from the second claim" });
}
