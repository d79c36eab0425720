-- GET /v1/models on the fleet's gateway: the models that have at least one Spark in service (UP; not DOWN,
-- DRAIN or MAINT), in OpenAI's list format; GET /v1/models/<id>: that model's object, or 404 when it has none. Installed by deploys/gateway.py next to haproxy.cfg and loaded with
-- `lua-load`; the model -> backend map is the routing map itself (its path in SPECFLEET_MODELS_MAP), read once
-- at load. Model names are validated Hugging Face repo ids ([A-Za-z0-9._/-]), so they need no JSON escapes.

local models = {}
local map = assert(io.open(os.getenv("SPECFLEET_MODELS_MAP"), "r"))
for line in map:lines() do
  local name, backend = line:match("^(%S+)%s+(%S+)$")
  if name then
    table.insert(models, { name = name, backend = backend })
  end
end
map:close()

local function in_service(backend)
  local be = core.backends[backend]
  if not be then
    return false
  end
  for _, server in pairs(be.servers) do
    local status = server:get_stats()["status"] or ""
    if status == "UP" or status:sub(1, 3) == "UP " then
      return true
    end
  end
  return false
end

local function object(name)
  return '{"id":"' .. name .. '","object":"model","owned_by":"specfleet"}'
end

local function answer(path)
  local wanted = path:match("^/v1/models/(.+)$")
  local data = {}
  for _, m in ipairs(models) do
    if in_service(m.backend) then
      if wanted == m.name then
        return 200, object(m.name)
      end
      table.insert(data, object(m.name))
    end
  end
  if wanted then
    return 404, '{"error":{"message":"no ready host serves this model (GET /v1/models lists those that have one)",'
      .. '"type":"invalid_request_error","code":404}}'
  end
  return 200, '{"object":"list","data":[' .. table.concat(data, ",") .. "]}"
end

core.register_service("specfleet_models", "http", function(applet)
  local status, body = answer(applet.path)
  applet:set_status(status)
  applet:add_header("content-type", "application/json")
  applet:add_header("content-length", tostring(#body))
  applet:start_response()
  applet:send(body)
end)
