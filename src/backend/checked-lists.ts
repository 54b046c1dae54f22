/**
 * The name lists of recent claims, checked once. A worker names the same queues (and job names)
 * in every claim; checking 1,000 queue names costs about 80 µs, more than a store's claim of 5
 * from one queue. So a list equal to one checked lately (same names, same order: compared by
 * `===`, about 1 µs for 1,000) gets that check's result again, and the store gets the very same
 * frozen array each time, which lets it keep a prepared form of it by identity (`preparedFor`):
 * a claim's cost then does not grow with the number of queues named.
 */
export class CheckedLists {
  /** Recent lists, most recent first: [the list as given (a copy), the checked list]. */
  private readonly recent: Array<[readonly string[], readonly string[]]> = [];

  /** @param size how many different lists to remember (several workers may share one backend). */
  constructor(
    private readonly check: (values: readonly string[]) => string[],
    private readonly size = 8,
  ) {}

  /** `values` checked by `check`, frozen; the same array as last time for an equal list. */
  of(values: readonly string[]): readonly string[] {
    if (Array.isArray(values)) {
      for (let i = 0; i < this.recent.length; i++) {
        const entry = this.recent[i]!;
        if (!sameList(entry[0], values)) continue;
        if (i > 0) this.recent.unshift(...this.recent.splice(i, 1));
        return entry[1];
      }
    }
    const checked = Object.freeze(this.check(values));
    // A copy: the caller may change its own array after this call.
    this.recent.unshift([[...values], checked]);
    if (this.recent.length > this.size) this.recent.pop();
    return checked;
  }
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

const prepared = new WeakMap<readonly string[], Map<string, unknown>>();

/**
 * A store's prepared form of a list the checking facade handed it (e.g. a queue list's range and
 * set), made by `make` once per list and kept as long as the list lives. Only frozen lists are
 * kept (CheckedLists' results), since an array that may change has no lasting prepared form;
 * any other list gets `make` every time. `kind` tells one store's forms from another's.
 */
export function preparedFor<T>(list: readonly string[], kind: string, make: (list: readonly string[]) => T): T {
  if (!Object.isFrozen(list)) return make(list);
  let forms = prepared.get(list);
  if (forms === undefined) prepared.set(list, (forms = new Map<string, unknown>()));
  if (forms.has(kind)) return forms.get(kind) as T;
  const form = make(list);
  forms.set(kind, form);
  return form;
}
