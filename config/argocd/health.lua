-- Argo CD health check for isochron.io/CrawlerVM.
--
-- It reads the conditions isochron sets, in the order kstatus (Flux, kubectl wait) reads
-- Stalled and Reconciling, and adds one judgement kstatus leaves out: a running crawler
-- whose probe refuted its SLO is Degraded.
--   no status, or status.observedGeneration behind metadata.generation  -> Progressing
--   Stalled=True (no node fits, RT network missing, VMI failed)          -> Degraded
--   Reconciling=True (being placed, VMI starting or being replaced)      -> Progressing
--   Ready not yet evaluated for this generation, or not True             -> Progressing
--   Ready=True, SLOConfirmed=False/SLORefuted or DeadlineMissed          -> Degraded
--   Ready=True otherwise (SLO met, probe pending or running, inconclusive) -> Healthy
-- A CrawlerVM cannot be suspended, and Argo CD itself reports a missing one as Missing
-- and one being deleted as Progressing, so this script returns neither Suspended nor
-- Missing.
--
-- Argo CD runs it without Lua's string library: only base and table functions here.
-- config/argocd/argocd-cm-patch.yaml embeds this file; test/health keeps them identical.

local hs = {}

local function condition(typ)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == typ then
      return c
    end
  end
  return nil
end

-- describe is "Type=Status (Reason): message", leaving out what is empty.
local function describe(c)
  local s = c.type .. "=" .. tostring(c.status)
  if c.reason ~= nil and c.reason ~= "" then
    s = s .. " (" .. c.reason .. ")"
  end
  if c.message ~= nil and c.message ~= "" then
    s = s .. ": " .. c.message
  end
  return s
end

-- stale tells a condition set for an earlier generation than the spec's.
local function stale(c, generation)
  return generation ~= nil and c.observedGeneration ~= nil and c.observedGeneration < generation
end

-- text is a condition's message, or the whole condition when it has none.
local function text(c)
  if c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return describe(c)
end

local generation = obj.metadata.generation

if obj.status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for isochron to place the crawler"
  return hs
end
local observed = obj.status.observedGeneration or 0
if generation ~= nil and observed < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for isochron to observe generation " .. tostring(generation) ..
    " (observed " .. tostring(observed) .. ")"
  return hs
end

local stalled = condition("Stalled")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(stalled)
  return hs
end

local reconciling = condition("Reconciling")
if reconciling ~= nil and reconciling.status == "True" then
  hs.status = "Progressing"
  hs.message = describe(reconciling)
  return hs
end

local ready = condition("Ready")
if ready == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the Ready condition"
  return hs
end
if stale(ready, generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for isochron to check the VMI of generation " .. tostring(generation) ..
    "; last seen " .. describe(ready)
  return hs
end
if ready.status ~= "True" then
  hs.status = "Progressing"
  hs.message = describe(ready)
  return hs
end

local slo = condition("SLOConfirmed")
if slo == nil then
  hs.status = "Healthy"
  hs.message = text(ready) .. "; SLOConfirmed not reported yet"
  return hs
end
if stale(slo, generation) then
  hs.status = "Healthy"
  hs.message = text(ready) .. "; SLOConfirmed not yet evaluated for generation " .. tostring(generation)
  return hs
end
if slo.status == "False" and (slo.reason == "SLORefuted" or slo.reason == "DeadlineMissed") then
  hs.status = "Degraded"
  hs.message = "SLO refuted: " .. text(slo)
  return hs
end
hs.status = "Healthy"
hs.message = text(ready) .. "; " .. describe(slo)
return hs
