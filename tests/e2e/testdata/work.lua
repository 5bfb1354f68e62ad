-- Deterministic work with a syscall per round (os.clock reads the process
-- CPU clock through clock_gettime), until killed.
local t = {}
local function work(n)
  local s = 0
  for i = 1, n do s = s + (i * 7) % 13 end
  return s
end
local start = os.clock()
local round = 0
while os.clock() - start < 60 do
  round = round + 1
  t[round % 100] = work(2000) + round
end
