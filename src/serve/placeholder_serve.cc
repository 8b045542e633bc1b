// Placeholder so the serve library has a source until the HTTP layer lands (removed then).
namespace gyre {}
