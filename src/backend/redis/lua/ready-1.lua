--[[
  ready: the queues of the ready index (ready_mark in _common.lua) that may have a claimable job
  now: those marked with a time at or before Redis' clock (or the injected one). Read by a claim
  over many queues, which then runs claim-4.lua only on the named queues among them. One server
  only: on a cluster the index is not kept (READY_INDEX) and this script is not called.

  KEYS[1] ready    <prefix>:ready
  ARGV[1] now in ms, or '' for Redis TIME
  Returns the queue names, in no particular order.
]]
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', int(now_ms(ARGV[1])))
