/// A value handed to another thread where the code guarantees there is no race. The package's
/// one unchecked box: every use says, beside it, why the value is safe to send.
///
/// `package`: the object layer uses it too; it is not API.
package struct UncheckedSendable<T>: @unchecked Sendable {
    // @unchecked: this type exists to assert what the compiler cannot check; see each use.
    package let value: T
    package init(_ value: T) { self.value = value }
}
