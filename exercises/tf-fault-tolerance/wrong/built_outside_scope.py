import keras


def train(strategy, build_and_compile, dataset, epochs, backup_dir, callbacks):
    # Mistake: the model is built and compiled outside strategy.scope(), so its weights are plain variables on one
    # device: fit trains without the strategy (the same numbers here, but nothing is mirrored over the replicas)
    model = build_and_compile()
    backup = keras.callbacks.BackupAndRestore(backup_dir)
    model.fit(dataset, epochs=epochs, callbacks=[backup, *callbacks], verbose=0)
    return model
