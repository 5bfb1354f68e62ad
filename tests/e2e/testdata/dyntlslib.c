// The shared object dyntls.c loads: a thread-local counter, general-dynamic
// model (the default for -fPIC code), so a dlopen gives it dynamic TLS.
__thread int counted;

int count(void)
{
	return ++counted;
}
