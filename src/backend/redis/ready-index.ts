/**
 * Which queues a claim over several queues visits. A claim runs claim-4.lua on one queue after
 * another in turn order (starting after the last queue the claim before took from) until it has its limit; with 1,000 queues
 * named and one busy, that was 1,000 script calls per claim. On one server (and Sentinel) the
 * scripts keep a ready index, `<prefix>:ready` (lua/_common.lua, "Ready index"): every script that
 * puts a job into a lane or the scheduled set marks its queue in the same atomic step, and each
 * claim sets its queue's mark to what the queue still holds. A claim naming many queues reads the
 * index once (ready-1.lua) and visits only the named queues it lists, in the same turn order.
 *
 * Reading the index costs about a µs of Redis and of this process per queue it lists, so when most
 * named queues are ready (1,000 busy queues: 1,000 names read to visit one or two) trying every
 * queue in turn is cheaper, since the first ones tried fill the claim. A list whose claim found
 * ready at least a quarter of it ("dense") is claimed in turn without the index, until a claim
 * meets {@link DENSE_UNTIL_EMPTY_VISITS} queues that gave it nothing; either way the same queues
 * are taken from in the same order (a queue the index does not list holds nothing claimable).
 *
 * The read costs a round trip and a script call of its own, which with one busy queue among 1,000
 * was half the Redis work of a claim. So every claim script of such a claim also returns the index
 * as it leaves it (claim-4.lua, ARGV[6]), and the next claim over the list visits the queues that
 * answer lists ("the hint") without reading the index: one script call per claim. The hint misses
 * only what changed after the claim that returned it (a job added to another queue since): a claim
 * the hinted queues do not fill reads the index after all and visits the ready queues it has not
 * visited yet, so such a job waits at most while the hinted queues fill every claim, and the next
 * claim's hint, taken after the change, lists its queue.
 *
 * Not on a cluster: the index is one key for every queue, outside the queues' slots, so the scripts
 * cannot keep it there (READY_INDEX is false) and a claim visits every named queue in turn.
 */
import { preparedFor } from "../checked-lists.js";

/**
 * A claim naming at least this many queues reads the index first (one more round trip, a few µs of
 * Redis); below, visiting each named queue costs about as much.
 */
export const READY_INDEX_FROM_QUEUES = 4;

/**
 * Longest time between two claims over many queues that visit every named queue, ms, whatever the
 * index says. The index is exact for data this layout writes; this bounds the wait of a job a
 * process of an older layout stored in a queue that was not known when the layout was upgraded
 * (keys.ts, layout 5), and of one in a queue whose mark was deleted by hand.
 */
export const READY_FULL_PASS_MS = 60_000;

/** A list is dense, and claimed in turn without the index, once this share of it is ready. */
const DENSE_SHARE = 0.25;
/** A dense list goes back to the index after a claim that visited this many queues that gave it nothing. */
export const DENSE_UNTIL_EMPTY_VISITS = 8;

/** What is kept per queue list (by identity: the checking facade hands the same frozen list each time). */
interface ListState {
  /** Each queue's first position in the list (a name listed twice is visited once). */
  readonly positions: Map<string, number>;
  dense: boolean;
  /** When a claim over this list last visited every named queue (or the list was first seen), Date.now() ms. */
  lastFullPassAt: number;
  /** The ready index as the last claim script over this list left it (see the file comment), once; null: none kept. */
  hint: readonly string[] | null;
}

/** The queues a claim visits: positions in its list, in turn order. */
export interface Turns {
  readonly positions: number[];
  /** From the last claim's hint: when they do not fill the claim, {@link ReadyTurns.rest} reads the index. */
  readonly fromHint: boolean;
  /** Whether the claim scripts should return the index (claim-4.lua ARGV[6]) for the next claim. */
  readonly wantsHint: boolean;
}

export class ReadyTurns {
  /**
   * @param enabled false on a cluster (no index)
   * @param readReady the queues the index lists as ready now (ready-1.lua)
   */
  constructor(
    private readonly enabled: boolean,
    private readonly readReady: () => Promise<string[]>,
  ) {}

  /**
   * The queues a claim over `queues` starting at `start` visits, in turn order, or null for every
   * named queue in turn (a short list, no index, a dense list, or a full pass due).
   */
  async turns(queues: readonly string[], start: number): Promise<Turns | null> {
    if (!this.enabled || queues.length < READY_INDEX_FROM_QUEUES) return null;
    // Per list: with one timer for the process, the list that claimed first after each interval
    // took every full pass and another list might never get one.
    const state = listState(queues);
    const now = Date.now();
    if (now - state.lastFullPassAt >= READY_FULL_PASS_MS) {
      state.lastFullPassAt = now;
      state.hint = null;
      return null;
    }
    const hint = state.hint;
    state.hint = null;
    if (state.dense) return null;
    const positions = inTurnOrder(state, queues.length, start, hint ?? (await this.readReady()), null);
    if (positions.length >= READY_INDEX_FROM_QUEUES && positions.length >= DENSE_SHARE * state.positions.size) state.dense = true;
    // A list found dense is claimed in turn from the next claim on: no hint to keep for it.
    return { positions, fromHint: hint !== null, wantsHint: !state.dense };
  }

  /**
   * After a claim from the hint that the hinted queues did not fill: the ready queues it has not
   * visited (`visited`: positions), from the index read now, in turn order from `start`.
   */
  async rest(queues: readonly string[], start: number, visited: ReadonlySet<number>): Promise<number[]> {
    const state = listState(queues);
    const ready = await this.readReady();
    // The next claim's hint, unless a claim script this claim runs after it leaves a newer one.
    state.hint = ready;
    return inTurnOrder(state, queues.length, start, ready, visited);
  }

  /** The index as a claim script over `queues` left it: the next claim's hint. */
  keepHint(queues: readonly string[], ready: readonly string[]): void {
    listState(queues).hint = ready;
  }

  /** After a claim over `queues` that visited every queue in turn: `emptyVisits` of them gave it nothing. */
  visitedInTurn(queues: readonly string[], emptyVisits: number): void {
    if (!this.enabled || queues.length < READY_INDEX_FROM_QUEUES || emptyVisits < DENSE_UNTIL_EMPTY_VISITS) return;
    listState(queues).dense = false;
  }
}

/** The positions of the `ready` queues in the list, in turn order from `start`, those in `skip` left out. */
function inTurnOrder(state: ListState, length: number, start: number, ready: readonly string[], skip: ReadonlySet<number> | null): number[] {
  const turns: number[] = [];
  for (const queue of ready) {
    const at = state.positions.get(queue);
    if (at !== undefined && (skip === null || !skip.has(at))) turns.push((at - start + length) % length);
  }
  turns.sort((a, b) => a - b);
  for (let i = 0; i < turns.length; i++) turns[i] = (turns[i]! + start) % length;
  return turns;
}

function listState(queues: readonly string[]): ListState {
  return preparedFor(queues, "redis-ready-turns", (list): ListState => {
    const positions = new Map<string, number>();
    list.forEach((queue, i) => {
      if (!positions.has(queue)) positions.set(queue, i);
    });
    return { positions, dense: false, lastFullPassAt: Date.now(), hint: null };
  });
}
