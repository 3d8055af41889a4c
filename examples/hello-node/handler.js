// Example sless function (runtime nodejs20, entrypoint handler.handle).

exports.handle = async (event) => {
  const body = event.json;
  let name = event.query.name;
  if (!name && body && typeof body === 'object' && !Array.isArray(body)) name = body.name;
  if (!name) name = 'world';
  return {
    message: `hello, ${name}`,
    method: event.method,
    path: event.path,
  };
};
