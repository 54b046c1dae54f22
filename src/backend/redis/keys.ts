/**
 * Where Conveyor keeps things in Redis. Every key starts with the backend's prefix.
 *
 * Per queue, every key carries the hash tag `{queue}`: `<prefix>:{<queue>}:<suffix>`. Redis
 * Cluster places keys by the hash of their tag, so all of one queue's keys live in one slot and
 * every Lua script, which only ever touches one queue, runs on one node. Job and lane keys are
 * built inside the scripts from the same base, so they share the slot too.
 *
 *   meta          HASH  paused ("1" while paused), seq (insertion counter), fw (fast-lane watermark),
 *                       wb (buckets in the table of compact jobs [1]), wn (compact jobs [0]),
 *                       do (default options text: the first compact job's; compact records
 *                       with the same options leave them out), rx (the queue's score in the ready index
 *                       <prefix>:ready, written with it; absent: not in it), wl (present: the table
 *                       may hold fields of a layout before 6, under the id as it is; see below)
 *   j:<id>        HASH  one job, fields below
 *   l:<id>        LIST  the job's log (ctx.log), "<at> <attempt> <line>" oldest first; deleted
 *                       with the job (delete_job in _common.lua)
 *   w:<b>         HASH  bucket b of the compact jobs (below): stored job id -> packed record
 *   codes         HASH  short codes of job names in packed records: name -> code, "#<code>" ->
 *                       name, "#" -> the last code given
 *   f:<name>      LIST  fast lane: waiting jobs of priority 0 in claim order (see enqueue-4.lua),
 *                       as stored job ids
 *   z:<name>      ZSET  slow lane: every other waiting job; score priority, member
 *                       run_at(13 digits) + seq(12 digits) + id, so member order is claim order
 *   names         SET   job names that have lanes in this queue
 *   sched         ZSET  scheduled jobs (delayed, or waiting out a retry) by run_at
 *   active        ZSET  active jobs by lease expiry (the rescuer's index)
 *   completed     ZSET  completed jobs by finished_at; + 2^50 for jobs kept forever
 *   cancelled     ZSET  the same for cancelled jobs
 *   dead          ZSET  the same for dead jobs
 *   expiry        ZSET  finished jobs that have a retention deadline, by that deadline
 *   flow          HASH  flow control (src/core/flow.ts), only for a queue with limits or a hold:
 *                       rm rate max, rd rate window ms, mr max running, pn per-name caps (JSON),
 *                       hu held until ms, rs counter of rate-window members, rn starts in the
 *                       rate window (kept by the claim); ln 1 once the queue
 *                       had a job with a group or limiter key (its claims take turns across lanes:
 *                       claim-4.lua), lc the lane the last claim took a job from (kept while ln is),
 *                       rc 1 while running counts are kept in `run`
 *   rate          ZSET  the rate window: one member per claim that started jobs, "<counter>:<starts>"
 *                       (layout 2: one member per start, "<counter>"), scored by its time
 *   L:<name>\n<lane> ZSET  slow lane of the waiting jobs of one name in one flow lane (a group,
 *                       "g:<key>", else a limiter key, "k:<key>": laneOf in src/core/job-flow.ts);
 *                       as z:<name>. Such jobs are never compact nor in a fast lane
 *   ls:<name>     ZSET  the lanes of L:<name>\n* that may hold jobs (score 0, read by lex order from
 *                       the lane cursor); a claim that finds one empty removes it
 *   kr:<key>      ZSET  a limiter key's rate window, as `rate`, trimmed lazily (kn:<key>); expires one to
 *                       two minutes after it last counts
 *   kn:<key>      STRING "<starts> <until> <members> <trim at>": the starts of the members in kr:<key>
 *                       (as rn for `rate`; between trims it includes starts that left the window), until
 *                       when (Redis' clock, ms) both keys live, so a claim renews their expiry only when
 *                       it is near, how many members kr:<key> holds and at how many it is trimmed next
 *                       (limiter_window in claim-4.lua; layout 3: "<starts>"); expires with kr:<key>
 *   run           HASH  running counts while flow field rc is set (a queue with per-name caps or
 *                       keyed jobs): n:<name> and g:<group key> -> active jobs, a field at 0 removed;
 *                       kept by claim, complete, fail, release, rescue and cancel (running_note in
 *                       _common.lua)
 *   kh:<key>      STRING a limiter key's hold (RetryLater with pause "key"): held until ms; expires
 *                       a minute after that
 *   idx           ZSET  every job NOT in a fast lane, by seq: with the fast lanes (already in seq
 *                       order) it lets list() walk jobs newest first without a per-job entry for
 *                       the bulk of a backlog
 *   crons         SET   ids of the queue's cron schedules
 *   cron:<id>     HASH  one cron schedule: d definition JSON, t timing, a anchor_at, l last_tick_at
 *                       (absent before the first tick), v version, c created_at, u updated_at (see
 *                       schedule-upsert-1.lua). In the queue's slot, so a firing moves l and
 *                       enqueues the tick's jobs in one script (schedule-fire-5.lua).
 *   ev            STREAM the queue's event log (queue.events(), GET /v1/events): one entry per change
 *                       of a job, appended by the script that makes it (log_event in _common.lua),
 *                       fields t "<type>[ <attempt>[ <at ms>]]" (type '' for "added", attempt left out
 *                       when 0, time when Redis' own: the stream id's), n name, j stored job id, d
 *                       details JSON or '' (none, or an "added" event's common case: added_details
 *                       in _common.lua). Layouts 4 and 5 kept attempt and time in fields a and at.
 *                       Trimmed to about 100,000 entries; pruneEvents applies the retention
 *                       (event-log.ts, lua/prune-events-1.lua)
 *   dw            HASH  dedup windows (JobOptions.dedup): dedup key -> the window's job id
 *   dx            ZSET  dedup windows by the time they end (ms)
 *   wc            ZSET  flow parents waiting for their children (state wc), by seq
 *   fc:<id>       HASH  a flow parent's children: "<position>" -> "<queue>\n<id>\n<name>", and once a
 *                       child settled "o<position>" -> its outcome JSON (see _common.lua, Flows)
 *   added:<token> STRING the reply of one add (enqueue or flow) sent over a connection that may send it
 *                       twice, JSON, expiring after ADD_ATTEMPT_MEMORY_MS (see attempt_replay in
 *                       _common.lua): a resend answers what the first run did
 *
 * Stored job ids. Where a key holds one entry per waiting job (a fast lane's entry, a bucket's
 * field, an "added" event entry's j), an id made by newJobId (22 characters of Crockford base32)
 * is kept in 16 bytes of ASCII whose first is a control character, which no job id contains
 * (id_store in _common.lua, storedJobId and jobIdFromStored in codec.ts); any other id as it is.
 * Other event entries hold either form (log_event in _common.lua). Everywhere else (key names,
 * sorted set members, replies) an id is itself. A compact record's created_at is then kept as its
 * distance from the time in the id (compact_pack in _common.lua).
 *
 * Compact jobs. A job appended to a fast lane at enqueue (due now, priority 0: the bulk of any
 * backlog) has, while it waits there, no hash of its own: it is one field of a bucket hash,
 * `w:<b>`, job id -> "<seq> <created_at> <run_at> <options> <name code> <payload>" (numbers in
 * base 36; run_at empty when equal to created_at, options empty when equal to meta `do`). A
 * top-level key costs ~100 bytes of Redis memory before it holds anything; a field in a small
 * hash costs its bytes plus ~3. Its full hash is written when it leaves the fast lane: claimed,
 * or cancelled. A job with meta, an id or record over 64 bytes, or a full bucket gets its hash at
 * once, as every other job does; so does a compact job a shrinking table has no room for. Every
 * script that looks a job up by id asks both places; a job is in exactly one.
 * The buckets are a linear hash table (bucket of a field: the first 32 bits of its SHA-1, modulo
 * the table's size in the usual way): it grows by one bucket (splitting one) whenever the queue
 * holds more than 40 compact jobs per bucket and shrinks as they leave, so a bucket holds about
 * 40 at any depth and stays within Redis' limits for the compact listpack encoding
 * (hash-max-listpack-entries 128, hash-max-listpack-value 64, the defaults). See _common.lua.
 *
 * Job hash fields (absent means the default in brackets):
 *   n name, d payload JSON, p priority, r run_at, c created_at, s seq,
 *   o options "maxAttempts|retainCompletedMs|retainDeadMs|timeoutMs|backoff" (empty = null),
 *   st state: w waiting, s scheduled, a active, c completed, d dead, x cancelled,
 *   a attempt [0], k lease token [0], le lease expiry (of the current or last lease; read only
 *   while active), w worker JSON ({id}, or {id, host, pid} when the id does not hold them:
 *   codec.ts encodeWorker), sa started_at,
 *   f finished_at, sl stalls [0], rp replays [0], pg progress JSON, rs result JSON,
 *   e error JSON, h history JSON array of {a, w, s, f, o, e}, m meta JSON [null];
 *   flows: pi parent id, pq parent queue, pb parent key base, pp position in its flow (children);
 *   pc unsettled children, pf failure policy "fail" | "continue" (parents). State wc = waiting-children.
 *   flow control (job options group, limiter): ln lane, gk group key, gc group concurrency,
 *   lk limiter key, lm limiter max, ld limiter window ms; rc 1: counted in the queue's running
 *   counts by the claim that made it active (only meaningful while it is active and flow rc is set).
 *
 * Cross-queue keys, each read or written on its own, never inside a queue's script:
 *   <prefix>:queues        SET of every queue name used (stats(), maintenance, lookups by id).
 *                          Added to in the same round trip as, and just before, a queue's first
 *                          enqueue or pause by this process; it is discovery only, so a name in
 *                          it with no jobs is harmless.
 *   <prefix>:ready         ZSET, one server only (not on a cluster, where it would be outside the
 *                          queues' slots): the ready index, the queues that may have a claimable
 *                          job, each scored with the time from which it may (0 while jobs wait in
 *                          its lanes, else its earliest scheduled job's run_at). Kept by the queue
 *                          scripts themselves, unlike the keys around it: every script that puts a
 *                          job into a lane or `sched` marks the queue in the same step, a claim
 *                          sets the mark to what the queue still holds (lua/_common.lua, Ready
 *                          index). A claim over many queues reads it and visits only those.
 *   <prefix>:layout        the data layout version, so an older Conveyor refuses newer data at
 *                          connect. Each queue's meta field lv holds the newest layout that wrote
 *                          the queue (stamped by the writing script itself), so a process connected
 *                          before an upgrade is refused at run time too (layout_guard, _common.lua).
 *   <prefix>:event-log     "on" or "off": whether the scripts write the queues' event streams,
 *                          set by the first process on the prefix (SET NX); a process configured
 *                          otherwise refuses to start. Absent (older data): on.
 *   <prefix>:idem:<key>    idempotency keys on Redis' clock (SET NX PX; Redis expires them).
 *   {<prefix>:idem}:k:<key>, {<prefix>:idem}:exp
 *                          idempotency keys and their deadline index on an injected clock.
 * The wake-up channel `<prefix>:wake` is a pub/sub channel, not a key.
 */

/**
 * Version of the data layout above; bump it (and migrate) whenever the layout changes.
 *   1  every job is a hash of its own
 *   2  waiting jobs of the fast lanes are compact records in bucket hashes. Layout 1 data is
 *      valid layout 2 data (every job in the fallback form, an empty table), so the upgrade only
 *      rewrites the version (lua/layout-1.lua); a Conveyor of layout 1 refuses layout 2 data.
 *   3  a rate window (`rate`, kr:<key>) holds one member per claim with its number of starts,
 *      and the window's starts are kept in a count (flow field rn, kn:<key>). Layout 2 data is
 *      valid layout 3 data: a member without a count is one start, and a missing count is summed
 *      from the window's members by the next claim (trim_window in lua/claim-4.lua).
 *   4  running counts per name and group are kept (`run`, flow field rc, job field rc) instead of
 *      read from every active job by each claim, and a limiter key's count kn:<key> also says until
 *      when its keys live and when its window is trimmed next. Layout 3 data is valid layout 4 data: a queue without flow rc gets its
 *      counts from its active jobs at its next claim that needs them, and a count without "until"
 *      has its expiry renewed at the key's next start.
 *   5  the ready index <prefix>:ready (one server only), kept by every script that makes a job
 *      claimable. Layout 4 data is valid layout 5 data without the index: the upgrade builds it
 *      while it stamps every known queue (lua/layout-stamp-1.lua), in the same script per queue,
 *      so a job a layout 4 process stores before the stamp is marked by it, and one after it is
 *      refused by the layout guard. A layout 4 process writing to a queue unknown at the upgrade
 *      is not stopped: its jobs are found by the full pass a claim over many queues makes at least
 *      once a minute (READY_FULL_PASS_MS in ready-index.ts). Event entries leave the type of an
 *      "added" event and a time that is Redis' own blank (log_event in lua/_common.lua); entries of
 *      layout 4 read as before.
 *   6  fast lanes, bucket fields and "added" event entries hold job ids in their stored form
 *      (above), a compact record's created_at is its distance from the id's time, and an event
 *      entry's attempt and time share its field t: about 26 bytes less per waiting job. Layout 5
 *      data is valid layout 6 data: a lane entry and its bucket field were written in one form by
 *      one script, readers of event entries and lanes take either form, a record's created_at in
 *      full reads as before, and a lookup by id in a queue that may hold older fields (meta wl, set
 *      by the first layout 6 script on a queue with compact jobs, or lv still below 6) tries the id
 *      as it is after its stored form, until the queue's compact table next empties. Event entries
 *      with fields a and at (layouts 4 and 5) read as before.
 */
export const LAYOUT_VERSION = 6;

/** Key names of one queue. */
export class QueueKeys {
  /** `<prefix>:{<queue>}:`, the start of every key of this queue. */
  readonly base: string;
  readonly meta: string;
  readonly sched: string;
  readonly active: string;
  readonly completed: string;
  readonly cancelled: string;
  readonly dead: string;
  readonly expiry: string;
  readonly idx: string;
  readonly names: string;
  /** Flow control: limits and hold (HASH), and the rate window (ZSET). */
  readonly flow: string;
  readonly rate: string;
  readonly crons: string;
  /** The queue's event log (STREAM). */
  readonly events: string;

  constructor(
    prefix: string,
    readonly queue: string,
  ) {
    this.base = `${prefix}:{${queue}}:`;
    this.meta = `${this.base}meta`;
    this.sched = `${this.base}sched`;
    this.active = `${this.base}active`;
    this.completed = `${this.base}completed`;
    this.cancelled = `${this.base}cancelled`;
    this.dead = `${this.base}dead`;
    this.expiry = `${this.base}expiry`;
    this.idx = `${this.base}idx`;
    this.names = `${this.base}names`;
    this.flow = `${this.base}flow`;
    this.rate = `${this.base}rate`;
    this.crons = `${this.base}crons`;
    this.events = `${this.base}ev`;
  }

  job(id: string): string {
    return `${this.base}j:${id}`;
  }

  log(id: string): string {
    return `${this.base}l:${id}`;
  }

  fastLane(name: string): string {
    return `${this.base}f:${name}`;
  }

  /** Where the add sent under `token` keeps its reply (see attempt_replay in _common.lua). */
  addAttempt(token: string): string {
    return `${this.base}added:${token}`;
  }
}

/** The keys and channel shared by every queue under one prefix. */
export class PrefixKeys {
  readonly queues: string;
  readonly layout: string;
  /** The ready index (ZSET, one server only): queues that may have claimable jobs. */
  readonly ready: string;
  /** "on" or "off": the prefix's event log setting. */
  readonly eventLog: string;
  readonly channel: string;
  /** Deadline index of idempotency keys on an injected clock. */
  readonly onceIndex: string;

  constructor(readonly prefix: string) {
    this.queues = `${prefix}:queues`;
    this.layout = `${prefix}:layout`;
    this.ready = `${prefix}:ready`;
    this.eventLog = `${prefix}:event-log`;
    this.channel = `${prefix}:wake`;
    this.onceIndex = `{${prefix}:idem}:exp`;
  }

  /** An idempotency key on Redis' clock: no hash tag, so a cluster spreads them over its nodes. */
  onceKey(key: string): string {
    return `${this.prefix}:idem:${key}`;
  }

  /** An idempotency key on an injected clock: in the slot of its deadline index. */
  onceKeyWithIndex(key: string): string {
    return `{${this.prefix}:idem}:k:${key}`;
  }
}
