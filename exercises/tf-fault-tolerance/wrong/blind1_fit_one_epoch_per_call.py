import keras


def train(strategy, build_and_compile, dataset, epochs, backup_dir, callbacks):
    """Build and compile the model under `strategy` (call build_and_compile()), fit it on `dataset` for
    `epochs` epochs with `callbacks`, and return it. A run that is killed part-way and started again with the
    same backup_dir must continue from the last completed epoch, with the optimizer's state."""
    with strategy.scope():
        model = build_and_compile()
    backup = keras.callbacks.BackupAndRestore(backup_dir=backup_dir)
    # Mistake: every fit that ends normally deletes the backup, so none is left at the kill
    # one fit() per epoch, so each epoch is a clean unit of work
    for epoch in range(epochs):
        print(f"epoch {epoch + 1}/{epochs}")
        model.fit(dataset, initial_epoch=epoch, epochs=epoch + 1,
                  callbacks=[backup, *list(callbacks)], verbose=0)
    return model
