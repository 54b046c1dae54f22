--[[
  remove: deletes one finished job (completed, dead or cancelled) ahead of its retention: its hash
  and every index entry. An unfinished job is left alone (cancel it first).

  KEYS[1] meta       <base>meta
  KEYS[2] completed  <base>completed
  KEYS[3] cancelled  <base>cancelled
  KEYS[4] dead       <base>dead
  KEYS[5] expiry     <base>expiry
  KEYS[6] idx        <base>idx
  ARGV[1] job id
  Returns 'removed', 'not-found' or 'not-finished'.
]]
local base = string.sub(KEYS[1], 1, -5)
local id = ARGV[1]
local state = redis.call('HGET', base .. 'j:' .. id, 'st')
if not state then
  -- A compact job is waiting.
  if compact_get(buckets_open(base), id) then return 'not-finished' end
  return 'not-found'
end
local setOf = { c = 'completed', x = 'cancelled', d = 'dead' }
local set = setOf[state]
if not set then return 'not-finished' end
delete_job(base, id, set)
return 'removed'
