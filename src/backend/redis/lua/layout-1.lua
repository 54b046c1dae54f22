--[[
  layout: records the data layout version this Conveyor writes under its prefix, upgrading an
  older one in place: every layout it upgrades from is also valid data of the new one (see
  LAYOUT_VERSION in keys.ts), so only the version changes. A newer version is left alone (the
  caller refuses to work with it).

  KEYS[1] layout   <prefix>:layout
  ARGV[1] this Conveyor's layout version
  Returns the version stored before this call, or 0 when there was none.
]]
local stored = tonumber(redis.call('GET', KEYS[1]) or '0')
if stored < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
return stored
